package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/comm/mpi"

	"github.com/rankrun/rankrun/internal/mpienv"
	"github.com/rankrun/rankrun/scenario"
)

const scenarioExamples = `  rankrun scenario tests/multirank/testdata/*.txt
  rankrun scenario -v tests/multirank/testdata/replay-no-idle-reap.txt
  rankrun scenario --print-run tests/multirank/testdata/fault-exit-gen.txt         # "NP --ctx ... --gen ..."
  rankrun scenario --print-run --with-replay tests/multirank/testdata/replay-local-error-collective.txt
`

// scenarioCmd runs scenario files and prints PASS or FAIL per scenario with
// the reason; any failure makes the exit code 1.
func scenarioCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("scenario FILE...", "Run multi-rank regression scenarios in-process (checked collectives, each run under a deadline).\n"+
		"A scenario with replay-under-test runs twice: as written, and with the replay on.\n"+
		"The file format (keys, defaults, expectations, figures; pairs on one line are separated by two spaces or a tab)\n"+
		"is described in one place: scenario/FORMAT.md.", scenarioExamples, stderr)
	fs.Init("scenario", fs.ErrorHandling())
	generate := fs.String("generate", "", "write a generated family of scenarios ("+strings.Join(scenario.Families, ", ")+") as files into --out, and run nothing")
	outDir := fs.String("out", "", "with --generate: the directory to write the scenario files into")
	only := fs.String("backend", "", "in-process backend to run on: local | sim (default: each backend the scenario names, or both)")
	replayOn := fs.Bool("replay-on", false, "run only the variant with the replay under test on (under mpirun: the variant this job runs)")
	printRun := fs.Bool("print-run", false, "print, per file, one line: the rank count (mpirun -np) then the equivalent rankrun run flags; run nothing")
	withReplay := fs.Bool("with-replay", false, "with --print-run: the flags of the run with the replay under test on")
	verbose := fs.Bool("v", false, "print the figures of passing scenarios too")
	logLevel := fs.String("log-level", "error", "log level of the runs on stderr: debug | info | warn | error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *only != "" && !slices.Contains(scenario.InProcess, *only) {
		return usagef("--backend %q: must be local or sim (the in-process backends; under mpirun a scenario runs on MPI)", *only)
	}
	if *generate != "" {
		return generateScenarios(*generate, *outDir, fs.NArg(), stdout)
	}
	if *outDir != "" {
		return usagef("--out %s: applies to --generate (this command runs the scenario files given and writes nothing)", *outDir)
	}
	if *withReplay && !*printRun {
		return usagef("--with-replay applies to --print-run (to run the variant with its replay on, give --replay-on)")
	}
	if fs.NArg() == 0 {
		return usagef("scenario: no scenario file given (try tests/multirank/testdata/*.txt)")
	}
	var all []scenario.Scenario
	for _, f := range fs.Args() {
		s, err := scenario.ParseFile(f)
		if err != nil {
			return usageError{err}
		}
		all = append(all, s)
	}
	if *printRun {
		for _, s := range all {
			if *withReplay && s.ReplayUnderTest == "" {
				return usagef("--with-replay: %s has no replay-under-test", s.File)
			}
			args := s.RunArgs(*withReplay)
			if s.Backend == "sim" {
				// A scenario pinned to the simulation: its run is a sim run.
				args = append(args, s.SimArgs()...)
			}
			for i, a := range args {
				if strings.ContainsAny(a, " \t'\"") {
					args[i] = strconv.Quote(a)
				}
			}
			fmt.Fprintf(stdout, "%d %s\n", s.Ranks(), strings.Join(args, " "))
		}
		return nil
	}
	log, err := newLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	if *replayOn {
		for _, s := range all {
			if s.ReplayUnderTest == "" {
				return usagef("--replay-on: %s has no replay-under-test", s.File)
			}
		}
	}
	if launch := mpienv.Detect(); launch.UnderMPI {
		if len(all) != 1 {
			return usagef("scenario: under mpirun, give exactly one scenario file (each job is one run of one scenario)")
		}
		return scenarioMPI(&all[0], *replayOn, log, stdout, stderr)
	}
	failed, runs := 0, 0
	var skipped []string
	for _, s := range all {
		if len(backendsOf(s, *only)) == 0 {
			skipped = append(skipped, fmt.Sprintf("%s runs on %s only (its backend key)", s.File, strings.Join(s.Backends(), ", ")))
		}
		for _, backend := range backendsOf(s, *only) {
			runs++
			opts := []scenario.Option{scenario.WithLogger(log), scenario.WithBackend(backend)}
			if *replayOn {
				o := scenario.RunVariant(context.Background(), s, true, opts...)
				line, pass := s.VerdictLine(o, true)
				fmt.Fprintln(stdout, line)
				if !pass {
					failed++
				}
				continue
			}
			r := scenario.Run(context.Background(), s, opts...)
			switch {
			case !r.Pass:
				failed++
				fmt.Fprintln(stdout, r)
			case *verbose:
				fmt.Fprintln(stdout, r)
			default:
				fmt.Fprintf(stdout, "PASS %s [%s]\n", s.Label(), backend)
			}
		}
	}
	if runs == 0 {
		return usagef("--backend %s: no scenario given runs on it: %s", *only, strings.Join(skipped, "; "))
	}
	for _, sk := range skipped {
		fmt.Fprintf(stdout, "SKIP %s, not on --backend %s\n", sk, *only)
	}
	fmt.Fprintf(stdout, "%d runs of %d scenarios, %d passed, %d failed\n", runs, len(all), runs-failed, failed)
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}

// scenarioMPI runs this process's rank of one variant of a scenario under
// mpirun (checked, with the scenario's collective timeout) and judges it
// with the same Go code as in-process: world rank 0 judges the report; a
// rank that fails judges its error, prints the verdict and ends the job
// (the job's exit status is then non-zero whatever the verdict: the verdict
// line is the answer). Exit 0 means an "ok" variant passed.
func scenarioMPI(s *scenario.Scenario, withReplay bool, log *zap.Logger, stdout, stderr io.Writer) error {
	if !mpi.Available() {
		_, err := mpi.Init(mpi.Config{})
		return fmt.Errorf("%w (make build-mpi builds bin/rankrun-mpi)", err)
	}
	if b := s.TimingBounds(withReplay); len(b) > 0 {
		return usagef("scenario %s bounds timing figures from above (%s): under mpirun the operating system's wake-ups set them; run it in-process",
			s.File, strings.Join(b, ", "))
	}
	w, err := mpi.Init(mpi.Config{Checked: true, Timeout: s.CollectiveTimeout})
	if err != nil {
		return err
	}
	if err := w.RequireSize(s.Ranks()); err != nil {
		if w.Rank() == 0 {
			fmt.Fprintf(stderr, "rankrun: scenario %s: %v\n", s.File, err)
		}
		return exitError{code: w.Finalize(2)}
	}
	log = log.With(zap.Int("world_rank", w.Rank()))
	o := scenario.RunRank(context.Background(), w.Comm(), s, withReplay, scenario.WithLogger(log))
	if o.Err != nil {
		line, _ := s.VerdictLine(o, withReplay)
		fmt.Fprintf(stdout, "scenario: %s [world rank %d]\n", line, w.Rank())
		if f, ok := stdout.(interface{ Sync() error }); ok {
			_ = f.Sync()
		}
		w.Abort(1, o.Err)
		return exitError{code: 1}
	}
	code := 0
	if w.Rank() == 0 {
		line, pass := s.VerdictLine(o, withReplay)
		fmt.Fprintf(stdout, "scenario: %s [world rank 0]\n", line)
		if !pass {
			code = 1
		}
	}
	return exitError{code: w.Finalize(code)}
}

// generateScenarios writes a generated family as scenario files.
func generateScenarios(family, dir string, nargs int, stdout io.Writer) error {
	if dir == "" {
		return usagef("--generate: --out DIR is required")
	}
	if nargs > 0 {
		return usagef("--generate takes no scenario file")
	}
	all, err := scenario.Generate(family)
	if err != nil {
		return usagef("--generate: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for _, s := range all {
		path := filepath.Join(dir, s.Name+".txt")
		if err := os.WriteFile(path, []byte(s.Format()), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}

// backendsOf lists the backends to run s on: only, when given (if s allows
// it), else every backend s names.
func backendsOf(s scenario.Scenario, only string) []string {
	if only == "" {
		return s.Backends()
	}
	if slices.Contains(s.Backends(), only) {
		return []string{only}
	}
	return nil
}
