// One run of the bench: every part's rows in the table's order, then the
// table printed and written.

package benchtab

import (
	"encoding/json"
	"io"
	"os"
)

// A Source adds rows of the caller's to the table with add, and says with
// missing what it could not measure and why (the table lists it and the
// run goes on).
type Source func(add func(Row), missing func(what string, err error))

// Options are one run's inputs. Run trusts them: the caller refuses bad
// counts and paths before any work (rankrun bench, as usage errors).
type Options struct {
	Raw      string // the folder of scripts/bench.sh's raw results ("": none, only the figures measured here)
	JSON     string // where the table is written as JSON ("": nowhere)
	Markdown string // the Markdown file (BENCHMARKS.md) whose generated section is rewritten ("": none)
	Command  string // the command line the outputs record

	// Requests of the in-process executor runs (each at least 1): the
	// idle handover's, each seed-shape run's, each control-plane run's.
	HandoverRequests, SeedRequests, ControlPlaneRequests int

	// Sources add the caller's rows, in order, after the in-process
	// executor's and before the simulation speed's.
	Sources []Source

	// SimSpeedReps is how many times each simulation-speed figure is run,
	// the best kept (0: none).
	SimSpeedReps int
}

// Run measures the table, prints it on stdout and writes it where o says.
// What could not be measured is said on stderr, listed in the table, and
// is no error; a failed in-process executor run or an output that cannot
// be written is.
func Run(o Options, stdout, stderr io.Writer) error {
	out := &table{Machine: machineInfo(o.Raw, o.Command)}
	missing := out.missingTo(stderr)
	if o.Raw != "" {
		rawRows(o.Raw, out.add, missing)
	}
	if err := executorRows(o.Raw, o.HandoverRequests, o.SeedRequests, o.ControlPlaneRequests, out.add, missing); err != nil {
		return err
	}
	for _, s := range o.Sources {
		s(out.add, missing)
	}
	if o.SimSpeedReps > 0 {
		simSpeedRows(o.SimSpeedReps, out.add, missing)
	}
	return writeOutputs(stdout, o, *out)
}

// writeOutputs prints the table and writes its JSON and Markdown files.
func writeOutputs(stdout io.Writer, o Options, out table) error {
	printTable(stdout, out)
	if o.JSON != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.JSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if o.Markdown != "" {
		if err := writeMarkdown(o.Markdown, o.Raw, out); err != nil {
			return err
		}
	}
	return nil
}
