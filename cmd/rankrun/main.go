// Command rankrun runs disaggregated LLM-serving control planes: context
// (prefill) ranks send verified KV-cache blocks to generation (decode) ranks
// through a rank-safe transfer layer, in one process (goroutine ranks) or one
// rank per process under mpirun.
//
//	rankrun run         one run, with a report (text, --json, --trace)
//	rankrun sweep       several layout pairs and workloads: table, CSV, JSON, plot
//	rankrun scenario    regression scenarios from files
//	rankrun devices     the GPUs NVML sees and the KV pool each local rank gets
//	rankrun explore     search simulated rank schedules for desyncs, hangs and leaks
//	rankrun bench       the benchmark table (make bench)
//	rankrun analyze     a job's story from its ranks' failure dumps (rankrun's, PyTorch's)
//	rankrun validate    the cost model against every published figure it knows
//	rankrun throughput  the cost model's offline throughput of each layout
//	rankrun goodput     one layout pair's goodput by bisection against latency SLOs
//	rankrun version     the version, commit and Go toolchain of this binary
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/internal/mpienv"
)

// usageError is a bad command line: exit code 2.
type usageError struct{ error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitError carries an exit code for an outcome that is not a Go error
// (a run that finished with leaks, say).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

const topUsage = `rankrun: rank-safe KV-cache transfer runtime for disaggregated LLM serving

Usage:
  rankrun run      [flags]   one disaggregated run and its report
  rankrun sweep    [flags]   run several layout pairs and workloads; table, CSV, JSON, plot
  rankrun scenario FILE...   run regression scenarios (tests/multirank/testdata/*.txt)
  rankrun devices  [flags]   GPUs seen by NVML and the KV pool each local rank would get
  rankrun explore  [flags]   search simulated rank schedules for desyncs, hangs and leaks
  rankrun bench    [flags]   benchmark table of ratios against references (make bench)
  rankrun analyze  DIR       a job's story from its ranks' failure dumps (run --dump-dir, PyTorch's flight recorder)
  rankrun validate [flags]   the cost model against every published figure it knows, with the error
  rankrun throughput [flags] the cost model's offline throughput of each layout under a serving scheduler
  rankrun goodput  [flags]   one layout pair's goodput: bisection over the arrival rate against latency SLOs
  rankrun version            the version, commit and Go toolchain of this binary

Run 'rankrun COMMAND -h' for the flags and examples of a command.
`

func main() {
	stop, err := startProfile(os.Getenv("RANKRUN_CPUPROFILE"), os.Getenv("RANKRUN_MEMPROFILE"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "rankrun: RANKRUN_CPUPROFILE or RANKRUN_MEMPROFILE: %v\n", err)
		os.Exit(2)
	}
	code := realMain(os.Args[1:], os.Stdout, os.Stderr)
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "rankrun: writing a profile: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runCmd(args[1:], stdout, stderr)
	case "sweep":
		err = sweepCmd(args[1:], stdout, stderr)
	case "scenario":
		err = scenarioCmd(args[1:], stdout, stderr)
	case "devices":
		err = devicesCmd(args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(args[1:], stdout, stderr)
	case "explore":
		err = exploreCmd(args[1:], stdout, stderr)
	case "analyze":
		err = analyzeCmd(args[1:], stdout, stderr)
	case "validate":
		err = validateCmd(args[1:], stdout, stderr)
	case "throughput":
		err = throughputCmd(args[1:], stdout, stderr)
	case "goodput":
		err = goodputCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, topUsage)
		return 0
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	default:
		fmt.Fprintf(stderr, "rankrun: unknown command %q (want run, sweep, scenario, explore, devices, bench, analyze, validate, throughput, goodput or version)\n", args[0])
		return 2
	}
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		if quietRank() {
			leaveLast()
		} else {
			fmt.Fprintf(stderr, "rankrun: %v\n", ue.error)
		}
		return 2
	}
	if errors.Is(err, mpi.ErrUnderMPI) && quietRank() {
		leaveLast()
		return 1
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "rankrun: %s\n", ee.msg)
		}
		return ee.code
	}
	for _, line := range strings.Split(err.Error(), "\n") { // errors.Join's: each names the tool
		fmt.Fprintf(stderr, "rankrun: %s\n", line)
	}
	return 1
}

// quietRank reports whether this process is a rank other than world rank 0
// of an mpirun job: a refusal that every rank reaches alike (a bad command
// line, a build without MPI) is printed once, by world rank 0.
func quietRank() bool {
	l := mpienv.Detect()
	return l.UnderMPI && l.WorldRank > 0
}

// quietExitBound bounds how long a quiet rank waits for mpirun to end the
// job (leaveLast). A variable only so that a test, which has no mpirun to
// end it, can wait less.
var quietExitBound = 30 * time.Second

// leaveLast keeps a quiet rank until mpirun ends the job (mpi.LeaveLast):
// world rank 0 prints the refusal and exits first.
func leaveLast() { mpi.LeaveLast(quietExitBound) }

// newFlagSet returns a flag set that reports errors instead of exiting, with
// a usage text that ends in examples.
func newFlagSet(name, synopsis, examples string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: rankrun %s\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExamples:\n%s", examples)
	}
	return fs
}

// parseFlags parses args, turning a flag error into a usage error.
//
// A bad flag gives one line (the caller prints it) and a pointer to -h, not
// the whole usage text; -h prints the usage with its examples.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		return usagef("%s: %v (rankrun %s -h lists the flags)", fs.Name(), err, fs.Name())
	}
	if fs.NArg() > 0 && fs.Name() != "scenario" && fs.Name() != "analyze" {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}
