package main

import (
	"io"
	"os"

	"github.com/rankrun/rankrun/internal/benchtab"
	"github.com/rankrun/rankrun/internal/perfsuite"
	"github.com/rankrun/rankrun/internal/runfiles"
	"github.com/rankrun/rankrun/internal/seedtab"
)

const benchExamples = `  make bench                                    # everything: scripts/bench.sh runs the parts, then this
  rankrun bench --raw out/raw --json out/bench.json --md BENCHMARKS.md
  rankrun bench --raw '' --json /dev/null       # only the in-process executor figures
`

// benchCmd is rankrun bench: its flags, checked before any work, then
// benchtab's table, with the perf cases' and the seeds' rows.
func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "Benchmarks next to their references, as ratios: reads what scripts/bench.sh measured under --raw\n"+
		"(go test -bench outputs, out/bench-mpi.json, mpirun reports), runs the in-process executor figures itself,\n"+
		"prints the table and writes it as JSON and Markdown.", benchExamples, stderr)
	raw := fs.String("raw", "out/raw", "folder of raw results from scripts/bench.sh ('' : none)")
	jsonPath := fs.String("json", "out/bench.json", "write the table as JSON here ('' : no)")
	mdPath := fs.String("md", "", "write the table as Markdown here (BENCHMARKS.md) ('' : no)")
	command := fs.String("command", "rankrun bench", "the command line to record in the outputs")
	handoverN := fs.Int("handover-requests", 400, "requests of the in-process handover run (>= 1)")
	seedN := fs.Int("seed-requests", 6, "requests of each seed-shape run (>= 1)")
	cpN := fs.Int("cp-requests", 3000, "requests of each control-plane throughput run (>= 1)")
	perfPath := fs.String("perf", perfsuite.File, "the committed perf-regression figures: each case is run and shown beside them ('' : not)")
	seed001 := fs.Bool("seed001", true, "with seed 000's table, seed 001's stall in virtual time (its job: ~100 s and 6 GB)")
	simReps := fs.Int("simspeed-reps", 3, "runs of each simulation-speed figure, the best kept (0: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"handover-requests", *handoverN}, {"seed-requests", *seedN}, {"cp-requests", *cpN}} {
		if n.v < 1 {
			return usagef("--%s %d: must be at least 1", n.flag, n.v)
		}
	}
	if *simReps < 0 {
		return usagef("--simspeed-reps %d: must be at least 0", *simReps)
	}
	// The outputs are written after minutes of measuring: a path that
	// cannot be written is refused now (it was found after the work).
	for _, o := range []struct{ flag, path string }{{"--json", *jsonPath}, {"--md", *mdPath}} {
		if o.path == "" {
			continue
		}
		if err := runfiles.ProbeWritable(o.path); err != nil {
			return usagef("%s %s: %v", o.flag, o.path, err)
		}
	}
	if *raw != "" {
		if st, err := os.Stat(*raw); err != nil || !st.IsDir() {
			return usagef("--raw %s: not a folder of raw results (scripts/bench.sh writes them: make bench; --raw '' runs only the in-process figures)", *raw)
		}
	}
	var sources []benchtab.Source
	if *perfPath != "" {
		sources = append(sources, perfsuite.Committed{Path: *perfPath, BuiltIn: perfFileBuiltIn}.Rows)
	}
	sources = append(sources, func(add func(benchtab.Row), missing func(string, error)) { seedtab.Rows(*seed001, add, missing) })
	return benchtab.Run(benchtab.Options{Raw: *raw, JSON: *jsonPath, Markdown: *mdPath, Command: *command,
		HandoverRequests: *handoverN, SeedRequests: *seedN, ControlPlaneRequests: *cpN,
		Sources: sources, SimSpeedReps: *simReps}, stdout, stderr)
}
