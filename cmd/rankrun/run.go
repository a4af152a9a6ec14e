package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/mpienv"
	"github.com/rankrun/rankrun/internal/runfiles"
	"github.com/rankrun/rankrun/launch"
	"github.com/rankrun/rankrun/runspec"
)

const runExamples = `  rankrun run                                   # CTX tp=1 -> GEN tp=4, 64 requests, in-process
  rankrun run --ctx tp=2,pp=2 --gen tp=4 --requests 200 --arrival rate=500 --json
  rankrun run --transfer sync --replay no-idle-reap --ctx-blocks 64 --stall-timeout 2s
  rankrun run --checked --fault fail-transfer@gen:1,req=3 --trace run.json
  rankrun run --requests 1000000 --layers 1 --kv-heads 1 --head-dim 8 --requests-out reqs.jsonl
  mpirun -np 5 --oversubscribe bin/rankrun-mpi run --ctx tp=1 --gen tp=4   # one rank per process

SIGINT or SIGTERM ends the run early: every rank stops, the partial report
(marked interrupted) is printed and the trace written, and the exit code is
130 or 143. A run that fails prints what it measured up to the error, with
an "error" object in --json (kind, message, ranks).
`

func runCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("run", "One disaggregated run: CTX ranks prefill and send verified KV blocks to GEN ranks, which decode.\n"+
		"The number of ranks is CTX ranks + GEN ranks, derived from --ctx and --gen.", runExamples, stderr)
	var f runFlags
	f.Register(fs, true)
	ranks := fs.Int("ranks", 0, "local backend: number of ranks (must equal what the layouts need; 0: derived from them)")
	var o outputs
	fs.BoolVar(&o.json, "json", false, "print the report as JSON on stdout (stable field names)")
	fs.StringVar(&o.trace, "trace", "", "write a Chrome trace (Perfetto) of the run to this file")
	fs.StringVar(&o.requests, "requests-out", "", "write every request's record to this file as it finishes, one JSON object per line (JSON Lines)")
	fs.StringVar(&o.dumps, "dump-dir", "", "on a failure, every rank that can writes its dump (flight recorder, guard values, sessions, pool, decisions, stacks) here, one JSON file per rank; read them with rankrun analyze DIR")
	// With --json (as the parser read it, up to a bad flag), a refused
	// command line is an error object on stdout too.
	defer func() { jsonUsageError(err, o.json, stdout) }()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.NoteSet(fs)
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	log, err := newLogger(f.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	cfg.Log = log
	cfg.Trace, cfg.Records = o.trace != "", o.requests != ""
	if err := o.check(); err != nil {
		return err
	}
	backend, err := f.resolveBackend()
	if err != nil {
		return err
	}
	cfg.DumpDir, cfg.DumpBackend, cfg.DumpStacks, cfg.DumpJob = o.dumps, backend, backend == "mpi", jobID(backend)
	if backend == "mpi" {
		if *ranks != 0 {
			return usagef("--ranks applies to the local backend only; under mpirun the world size is -np")
		}
		return runMPI(cfg, f, o, stdout, stderr)
	}
	if *ranks != 0 && *ranks != cfg.Ranks() {
		return usagef("--ranks %d: ctx %s (%d ranks) + gen %s (%d ranks) need %d", *ranks, cfg.Ctx, cfg.Ctx.Ranks(), cfg.Gen, cfg.Gen.Ranks(), cfg.Ranks())
	}
	if o.streams, err = runfiles.Open(o.trace, o.requests); err != nil {
		return err
	}
	if o.streams != nil {
		cfg.Sink = o.streams
	}
	f.NoteSimOnly(backend, stderr) // every check passed: the run starts
	// On a terminal, a bar of the requests finished (rate, ETA); the GEN
	// leaders' records count them, so the run keeps them (to the sink).
	bar := newProgressBar("run", cfg.Workload.Requests, stderr)
	if bar != nil {
		p := progressSink{bar: bar}
		if o.streams != nil {
			p.next = o.streams
		}
		cfg.Records, cfg.Sink = true, p
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	rep, err := f.runIn(ctx, backend, cfg)
	if bar != nil {
		_ = bar.Clear() // before the report
	}
	return o.finish(ctx, rep, err, stdout)
}

// resolveBackend turns --backend auto into local or mpi, and refuses an
// in-process backend under mpirun.
func (f runFlags) resolveBackend() (string, error) {
	launch := mpienv.Detect()
	switch f.Backend {
	case "auto":
		if launch.UnderMPI {
			return "mpi", nil
		}
		return "local", nil
	case "local", "sim":
		if !launch.UnderMPI {
			return f.Backend, nil
		}
		if !mpi.Available() {
			return "", launch.RefuseUnderMPI("rankrun --backend " + f.Backend)
		}
		return "", usagef("--backend %s: under mpirun every process would run the whole job in-process (rank %d of %d); "+
			"drop --backend %s (auto uses MPI under mpirun), or run without mpirun", f.Backend, launch.WorldRank, launch.WorldSize, f.Backend)
	case "mpi":
		if !mpi.Available() {
			if launch.UnderMPI { // which rank of how many, as every build without MPI says under mpirun
				return "", launch.RefuseUnderMPI("rankrun --backend mpi")
			}
			return "", usagef("--backend mpi: this binary was built without MPI: rebuild with -tags mpi (make build-mpi builds bin/rankrun-mpi)")
		}
		return "mpi", nil
	}
	return "", usagef("--backend %q: must be auto, local, mpi or sim", f.Backend)
}

// runIn runs cfg on an in-process backend (local or sim) and returns its
// report, marked with the backend and the wall time it took (the only
// host-dependent figures, named wall_*). After an error the report holds
// what was measured up to it, and its error object names the flag or
// signal that ended the run, when one did.
func (f runFlags) runIn(parent context.Context, backend string, cfg executor.Config) (*executor.Report, error) {
	start := time.Now()
	f.Timeout = f.Deadline(cfg)
	var rep *executor.Report
	var err error
	ctx := parent
	if backend == "sim" {
		rep, err = f.Simulate(ctx, cfg)
	} else {
		var cancel context.CancelFunc
		ctx, cancel = f.runContext(parent)
		defer cancel()
		rep, err = executor.Run(ctx, cfg, launch.Local{Checked: f.CollChecked(), Timeout: f.CollectiveTimeout})
	}
	if err != nil {
		err = f.runError(ctx, err)
	}
	if rep != nil {
		rep.Backend, rep.WallSeconds, rep.Compute = backend, time.Since(start).Seconds(), runspec.DescribeCompute(&cfg)
		rep.WallPeakRSS = peakRSS()
		if rep.Compute != "" {
			rep.Compute += f.SampleNote
		}
		rep.KVSample = f.PayloadScale()
		f.markError(ctx, rep, err)
	}
	return rep, err
}

// markError names in rep's error object what ended the run when it was
// the command itself (a signal, --timeout).
func (f runFlags) markError(ctx context.Context, rep *executor.Report, err error) {
	if rep.Error == nil || err == nil {
		return
	}
	rep.Error.Message = err.Error()
	rep.Errors[len(rep.Errors)-1] = err.Error()
	if _, ok := interrupted(ctx, err); ok {
		rep.Error.Kind = "interrupted"
	} else if errors.Is(err, errRunTimeout) {
		rep.Error.Kind = "timeout"
	}
}

// errRunTimeout is the cause of a run that reached its --timeout.
var errRunTimeout = errors.New("the run did not finish within --timeout")

// runContext is the context of one run: it ends at --timeout.
func (f runFlags) runContext(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(parent, f.Timeout, fmt.Errorf("%w %v", errRunTimeout, f.Timeout))
}

// runError names the flag when a run ended on its own --timeout (whatever
// wait first noticed the deadline), so the user knows what to raise, and
// the signal when one interrupted it.
func (f runFlags) runError(ctx context.Context, err error) error {
	if ie, ok := interrupted(ctx, err); ok {
		return ie
	}
	if errors.Is(context.Cause(ctx), errRunTimeout) && !errors.Is(err, errRunTimeout) {
		return fmt.Errorf("%w %v (raise --timeout, or look for a hang): %w", errRunTimeout, f.Timeout, err)
	}
	return err
}

// runFlags are the flags shared by run, sweep, goodput and explore: the
// run's spec, with the commands' own ways of running it.
type runFlags struct{ runspec.Spec }

// peakRSS is this process's peak resident memory in bytes: Linux's VmHWM
// (/proc/self/status), else getrusage's ru_maxrss (KiB on Linux); 0 where
// unknown. VmHWM first: ru_maxrss of a process started by one that
// spawns with vfork (Go's os/exec) can be its parent's, taken over at exec.
func peakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 {
					return kb * 1024
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil || ru.Maxrss <= 0 {
		return 0
	}
	return ru.Maxrss * 1024
}
