package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rankrun/rankrun/executor/scenario"
)

const scenarioExamples = `  rankrun scenario tests/multirank/testdata/*.txt
  rankrun scenario -v tests/multirank/testdata/replay-no-idle-reap.txt
  rankrun scenario --print-run tests/multirank/testdata/fault-exit.txt             # "NP --ctx ... --gen ..."
  rankrun scenario --print-run --with-replay tests/multirank/testdata/replay-local-error-collective.txt
`

// scenarioCmd runs scenario files and prints PASS or FAIL per scenario with
// the reason; any failure makes the exit code 1.
func scenarioCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("scenario FILE...", "Run multi-rank regression scenarios in-process (checked collectives, each run under a deadline).\n"+
		"A scenario with replay-under-test runs twice: as written, and with the replay on.\n"+
		"The file format is described in tests/multirank/testdata/README.txt.", scenarioExamples, stderr)
	fs.Init("scenario", fs.ErrorHandling())
	printRun := fs.Bool("print-run", false, "print, per file, one line: the rank count (mpirun -np) then the equivalent `rankrun run` flags; run nothing")
	withReplay := fs.Bool("with-replay", false, "with --print-run: the flags of the run with the replay under test on")
	verbose := fs.Bool("v", false, "print the figures of passing scenarios too")
	logLevel := fs.String("log-level", "error", "log level of the runs on stderr: debug | info | warn | error")
	if err := parseFlags(fs, args); err != nil {
		return err
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
	failed := 0
	for _, s := range all {
		r := scenario.Run(context.Background(), s, scenario.WithLogger(log))
		switch {
		case !r.Pass:
			failed++
			fmt.Fprintln(stdout, r)
		case *verbose:
			fmt.Fprintln(stdout, r)
		default:
			fmt.Fprintf(stdout, "PASS %s\n", s.Label())
		}
	}
	fmt.Fprintf(stdout, "%d scenarios, %d passed, %d failed\n", len(all), len(all)-failed, failed)
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}
