package main

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"

	"github.com/rankrun/rankrun/diag"
)

const analyzeExamples = `  rankrun run --fault exit@gen:1,req=3 --dump-dir dumps; rankrun analyze dumps
  rankrun analyze --json dumps                      # the story as JSON, for tools
  rankrun analyze --trace last.json dumps           # the last moments, for Perfetto
  rankrun analyze /tmp/fr                           # PyTorch flight-recorder dumps (nccl_trace_rank_N)
`

// analyzeCmd reads a job's failure dumps and prints its story; its exit
// status says what the story found (analyzeStatuses).
func analyzeCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", "Read every rank's failure dump in DIR (rankrun run --dump-dir, or PyTorch NCCL flight-recorder\n"+
		"dumps: the pickle PyTorch writes, dump_json's JSON, or the pickle re-saved as JSON) and tell the job's\n"+
		"story: the ranks with no dump, whether the ranks' dump format versions agree, the first collective the\n"+
		"ranks entered differently and each side's guard values, the ranks that never arrived where others wait\n"+
		"and what they were doing instead, each group's wavefront and the requests still in flight on every rank.\n\n"+
		analyzeStatuses, analyzeExamples, stderr)
	jsonOut := fs.Bool("json", false, "print the story as JSON on stdout (stable field names)")
	trace := fs.String("trace", "", "also write the dumps' last moments as a Chrome trace (Perfetto) to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("analyze: want one directory of dumps, got %d arguments", fs.NArg())
	}
	if st, err := os.Stat(fs.Arg(0)); err == nil && !st.IsDir() {
		return usagef("analyze: %s is a file: want the directory of dumps (rankrun run --dump-dir DIR)", fs.Arg(0))
	}
	found, err := analyze(fs.Arg(0), *jsonOut, *trace, stdout)
	_, usage := asUsage(err)
	switch {
	case usage:
		return err
	case err != nil:
		return exitError{code: 2, msg: err.Error()} // no story
	case found:
		return exitError{code: 1} // the story says what
	}
	return nil
}

// analyzeStatuses documents analyze's exit status, for a CI job.
const analyzeStatuses = `Exit status: 0 the story names no hang and no mismatch; 1 it names a hang (ranks that wait where
others never arrived) or a mismatch (a collective the ranks entered differently, or readable dumps whose
format versions disagree); 2 no story: DIR holds no readable dump (or dumps of two jobs, or two of one
rank), the command line is bad, or the story or the trace could not be written. Ranks whose dumps are
missing or unreadable are listed in the story but do not by themselves make the status 1.`

// analyze tells the story of the dumps in dir and reports whether it
// names a hang or a mismatch.
func analyze(dir string, jsonOut bool, trace string, stdout io.Writer) (bool, error) {
	dumps, unreadable, err := diag.ReadDirSkipping(dir)
	if errors.Is(err, iofs.ErrNotExist) {
		return false, usageError{err} // a path that is not there is a bad argument (exit 2), as scenario's is
	}
	if err != nil {
		return false, err
	}
	if trace != "" {
		if err := writeTraceFile(trace, dumps); err != nil {
			return false, err
		}
	}
	s := diag.Analyze(dumps)
	s.Unreadable = unreadable
	if jsonOut {
		err = s.WriteJSON(stdout)
	} else {
		err = s.WriteText(stdout)
	}
	return s.Found(), err
}

func writeTraceFile(path string, dumps []*diag.Dump) error {
	f, err := os.Create(path)
	if err != nil {
		return usagef("--trace: %v", err)
	}
	if err := diag.WriteTrace(f, dumps); err != nil {
		f.Close()
		return fmt.Errorf("--trace %s: %w", path, err)
	}
	return f.Close()
}
