// Command rankrun runs disaggregated LLM-serving control planes: context
// (prefill) ranks send verified KV-cache blocks to generation (decode) ranks
// through a rank-safe transfer layer, in one process (goroutine ranks) or one
// rank per process under mpirun.
//
//	rankrun run        [flags]   one run and its report (text, --json, --trace FILE)
//	rankrun sweep      [flags]   several layout pairs (or every pair of a GPU budget: --gpus N) and workloads: table, goodput, CSV, JSON, plot
//	rankrun scenario   FILE...   regression scenarios (tests/multirank/testdata/*.txt), in-process, simulated or under mpirun
//	rankrun explore    [flags]   search simulated rank schedules for desyncs, hangs and leaks; prints a replay line
//	rankrun devices    [flags]   GPUs seen by NVML and the KV pool each local rank gets
//	rankrun bench      [flags]   the benchmark table of ratios against references (make bench)
//	rankrun analyze    DIR       a job's story from its ranks' failure dumps (run --dump-dir; PyTorch flight-recorder dumps too)
//	rankrun validate   [flags]   the cost model against every published figure it knows: source, prediction, error
//	rankrun throughput [flags]   the cost model's offline throughput of each layout under a serving scheduler
//	rankrun goodput    [flags]   one layout pair's goodput: bisection over the Poisson arrival rate against TTFT/TPOT SLOs
//	rankrun version              the version, commit and Go toolchain of this binary (also --version)
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
	"github.com/rankrun/rankrun/runspec"
)

// usageError is a bad command line: exit code 2.
type usageError struct{ error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// asUsage finds a bad command line in err's chain: a usageError, or a
// spec the flags described that runspec refused (it names the flag).
func asUsage(err error) (usageError, bool) {
	var ue usageError
	if errors.As(err, &ue) {
		return ue, true
	}
	var se *runspec.Error
	if errors.As(err, &se) {
		return usageError{se}, true
	}
	return ue, false
}

// exitError carries an exit code for an outcome that is not a Go error
// (a run that finished with leaks, say).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// command is one subcommand of rankrun.
type command struct {
	name, args, summary string // "run", "[flags]", what it does in one line
	run                 func(args []string, stdout, stderr io.Writer) error
}

// commands is every subcommand, in the order -h lists them. Dispatch, the
// usage text and the unknown-command message are made from it, and a test
// holds the README's list and the package doc to it (commandList).
var commands = []command{
	{"run", "[flags]", "one run and its report (text, --json, --trace FILE)", runCmd},
	{"sweep", "[flags]", "several layout pairs (or every pair of a GPU budget: --gpus N) and workloads: table, goodput, CSV, JSON, plot", sweepCmd},
	{"scenario", "FILE...", "regression scenarios (tests/multirank/testdata/*.txt), in-process, simulated or under mpirun", scenarioCmd},
	{"explore", "[flags]", "search simulated rank schedules for desyncs, hangs and leaks; prints a replay line", exploreCmd},
	{"devices", "[flags]", "GPUs seen by NVML and the KV pool each local rank gets", devicesCmd},
	{"bench", "[flags]", "the benchmark table of ratios against references (make bench)", benchCmd},
	{"analyze", "DIR", "a job's story from its ranks' failure dumps (run --dump-dir; PyTorch flight-recorder dumps too)", analyzeCmd},
	{"validate", "[flags]", "the cost model against every published figure it knows: source, prediction, error", validateCmd},
	{"throughput", "[flags]", "the cost model's offline throughput of each layout under a serving scheduler", throughputCmd},
	{"goodput", "[flags]", "one layout pair's goodput: bisection over the Poisson arrival rate against TTFT/TPOT SLOs", goodputCmd},
	{"version", "", "the version, commit and Go toolchain of this binary (also --version)", versionCmd},
}

// commandList is the list of commands, one a line, each line after
// indent: "rankrun run        [flags]   one run and its report ...".
func commandList(indent string) string {
	name, args := 0, 0
	for _, c := range commands {
		name, args = max(name, len(c.name)), max(args, len(c.args))
	}
	var b strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&b, "%srankrun %-*s %-*s   %s\n", indent, name, c.name, args, c.args, c.summary)
	}
	return b.String()
}

// topUsage is rankrun -h.
func topUsage() string {
	return "rankrun: rank-safe KV-cache transfer runtime for disaggregated LLM serving\n\nUsage:\n" +
		commandList("  ") + "\nRun 'rankrun COMMAND -h' for the flags and examples of a command.\n"
}

// unknownCommand is the refusal of a command that is not in the table.
func unknownCommand(name string) string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return fmt.Sprintf("rankrun: unknown command %q (want %s or %s)\n", name, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// versionCmd is rankrun version.
func versionCmd(_ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, versionLine())
	return nil
}

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
		fmt.Fprint(stderr, topUsage())
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, topUsage())
		return 0
	case "--version", "-version":
		args[0] = "version"
	}
	for _, c := range commands {
		if c.name == args[0] {
			return exitCode(c.run(args[1:], stdout, stderr), stderr)
		}
	}
	fmt.Fprint(stderr, unknownCommand(args[0]))
	return 2
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if ue, ok := asUsage(err); ok {
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
