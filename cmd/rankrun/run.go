package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/executor"
)

const runExamples = `  rankrun run                                   # CTX tp=1 -> GEN tp=4, 64 requests, in-process
  rankrun run --ctx tp=2,pp=2 --gen tp=4 --requests 200 --arrival rate=500 --json
  rankrun run --transfer sync --replay no-idle-reap --ctx-blocks 64 --stall-timeout 2s
  rankrun run --checked --fault fail-transfer@gen:1,req=3 --trace run.json
  mpirun -np 5 --oversubscribe bin/rankrun-mpi run --ctx tp=1 --gen tp=4   # one rank per process
`

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "One disaggregated run: CTX ranks prefill and send verified KV blocks to GEN ranks, which decode.\n"+
		"The number of ranks is CTX ranks + GEN ranks, derived from --ctx and --gen.", runExamples, stderr)
	var f runFlags
	f.register(fs, true)
	ranks := fs.Int("ranks", 0, "local backend: number of ranks (must equal what the layouts need; 0: derived)")
	jsonOut := fs.Bool("json", false, "print the report as JSON on stdout (stable field names)")
	traceFile := fs.String("trace", "", "write a Chrome trace (Perfetto) of the run to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.noteSet(fs)
	cfg, err := f.config()
	if err != nil {
		return err
	}
	log, err := newLogger(f.logLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	cfg.Log = log
	cfg.Trace = *traceFile != ""
	if *traceFile != "" {
		// Fail before the run, not after it, on an unwritable path.
		if err := checkWritable(*traceFile); err != nil {
			return usagef("--trace: %v", err)
		}
	}
	backend, err := f.resolveBackend()
	if err != nil {
		return err
	}
	if backend != "mpi" {
		if *ranks != 0 && *ranks != cfg.Ranks() {
			return usagef("--ranks %d: ctx %s (%d ranks) + gen %s (%d ranks) need %d", *ranks, cfg.Ctx, cfg.Ctx.Ranks(), cfg.Gen, cfg.Gen.Ranks(), cfg.Ranks())
		}
		rep, err := f.runInProcess(backend, cfg)
		if err != nil {
			return err
		}
		return emit(rep, *jsonOut, *traceFile, stdout)
	}
	if *ranks != 0 {
		return usagef("--ranks applies to the local backend only; under mpirun the world size is -np")
	}
	return runMPI(cfg, f, *jsonOut, *traceFile, stdout, stderr)
}

// runMPI runs this process's rank of an mpirun job. Rank 0 prints the
// report. A failing rank prints its error and aborts the job, so mpirun ends
// non-zero within seconds instead of leaving its peers waiting.
func runMPI(cfg executor.Config, f runFlags, jsonOut bool, traceFile string, stdout, stderr io.Writer) error {
	if !mpi.Available() {
		_, err := mpi.Init(mpi.Config{})
		return fmt.Errorf("%w (make build-mpi builds bin/rankrun-mpi)", err)
	}
	w, err := mpi.Init(mpi.Config{Checked: f.checked, Timeout: f.collTimeout})
	if err != nil {
		return err
	}
	if err := w.RequireSize(cfg.Ranks()); err != nil {
		err = fmt.Errorf("ctx %s (%d ranks) + gen %s (%d ranks) need mpirun -np %d: %w", cfg.Ctx, cfg.Ctx.Ranks(), cfg.Gen, cfg.Gen.Ranks(), cfg.Ranks(), err)
		if w.Rank() == 0 {
			fmt.Fprintf(stderr, "rankrun: %v\n", err)
		}
		return exitError{code: w.Finalize(2)}
	}
	cfg.Log = cfg.Log.With(zap.Int("world_rank", w.Rank()))
	ctx, cancel := f.runContext()
	defer cancel()
	rep, err := executor.RunRank(ctx, w.Comm(), cfg)
	if err != nil {
		err = f.runError(ctx, err)
		fmt.Fprintf(stderr, "rankrun: world rank %d: %v\n", w.Rank(), err)
		var te *comm.TimeoutError
		if errors.As(err, &te) {
			fmt.Fprintf(stderr, "flight recorder:\n%s", te.FlightLog())
		}
		w.Abort(1, err)
		return exitError{code: 1}
	}
	// Agree on the exit code before rank 0 prints: writing a large report
	// to mpirun's pty can block until mpirun drains it, and peers already
	// waiting in Finalize would keep mpirun from running.
	code := 0
	if w.Rank() == 0 {
		if traceFile != "" {
			if err := writeTrace(traceFile, rep); err != nil {
				fmt.Fprintf(stderr, "rankrun: %v\n", err)
				code = 1
			}
		}
		if !rep.OK() {
			code = 1
		}
	}
	final := w.Finalize(code)
	if w.Rank() == 0 {
		rep.Compute = describeCompute(&cfg)
		if err := emit(rep, jsonOut, "", stdout); err != nil {
			var ee exitError
			if errors.As(err, &ee) {
				if ee.msg != "" {
					fmt.Fprintf(stderr, "rankrun: %s\n", ee.msg)
				}
			} else {
				fmt.Fprintf(stderr, "rankrun: %v\n", err)
				final = max(final, 1)
			}
		}
	}
	return exitError{code: final}
}

// resolveBackend turns --backend auto into local or mpi, and refuses an
// in-process backend under mpirun.
func (f runFlags) resolveBackend() (string, error) {
	launch := comm.DetectLaunch()
	switch f.backend {
	case "auto":
		if launch.UnderMPI {
			return "mpi", nil
		}
		return "local", nil
	case "local", "sim":
		if launch.UnderMPI {
			return "", launch.RefuseUnderMPI("rankrun --backend " + f.backend)
		}
		return f.backend, nil
	case "mpi":
		return "mpi", nil
	}
	return "", usagef("--backend %q: must be auto, local, mpi or sim", f.backend)
}

// runInProcess runs cfg on an in-process backend (local or sim) and
// returns its report, marked with the backend and the wall time it took
// (the only host-dependent figures, named wall_*).
func (f runFlags) runInProcess(backend string, cfg executor.Config) (*executor.Report, error) {
	start := time.Now()
	if backend == "sim" {
		sc, err := f.simConfig()
		if err != nil {
			return nil, err
		}
		rep, res, err := executor.RunSim(context.Background(), cfg, sc)
		if err != nil {
			return nil, err
		}
		rep.Backend, rep.Sim = "sim", &executor.SimInfo{Seed: sc.Seed, Strategy: sc.Strategy.String(), Hardware: sc.Fabric.Name,
			Steps: res.Steps, Schedule: fmt.Sprintf("%016x", res.Schedule)}
		rep.WallSeconds, rep.Compute = time.Since(start).Seconds(), describeCompute(&cfg)
		return rep, nil
	}
	ctx, cancel := f.runContext()
	defer cancel()
	rep, err := executor.RunLocal(ctx, cfg, f.checked, f.collTimeout)
	if err != nil {
		return nil, f.runError(ctx, err)
	}
	rep.Backend, rep.WallSeconds, rep.Compute = "local", time.Since(start).Seconds(), describeCompute(&cfg)
	return rep, nil
}

// errRunTimeout is the cause of a run that reached its --timeout.
var errRunTimeout = errors.New("the run did not finish within --timeout")

// runContext is the context of one run: it ends at --timeout.
func (f runFlags) runContext() (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(context.Background(), f.timeout, fmt.Errorf("%w %v", errRunTimeout, f.timeout))
}

// runError names the flag when a run ended on its own --timeout (whatever
// wait first noticed the deadline), so the user knows what to raise.
func (f runFlags) runError(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errRunTimeout) && !errors.Is(err, errRunTimeout) {
		return fmt.Errorf("%w %v (raise --timeout, or look for a hang): %w", errRunTimeout, f.timeout, err)
	}
	return err
}

// emit prints the report and writes the trace; a report with errors or
// leaks makes the exit code 1.
func emit(rep *executor.Report, jsonOut bool, traceFile string, stdout io.Writer) error {
	if traceFile != "" {
		if err := writeTrace(traceFile, rep); err != nil {
			return err
		}
	}
	for i := range rep.Ranks_ {
		rep.Ranks_[i].Trace = nil
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.WriteText(stdout)
	}
	if !rep.OK() {
		return exitError{code: 1, msg: fmt.Sprintf("run ended with %d errors, %d leaked blocks", len(rep.Errors), rep.LeakedBlocks)}
	}
	return nil
}

func newLogger(level string, stderr io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: must be debug, info, warn or error", level)
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout(time.StampMicro)
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(stderr), lvl)
	return zap.New(core), nil
}

func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// writeTrace writes the run in the Chrome trace event format: one track
// (thread) per rank, named after its role and instance rank.
func writeTrace(path string, rep *executor.Report) error {
	// Metadata events carry ts 0: the format does not need it, but strict
	// readers of the trace event format expect every event to have one.
	type meta struct {
		Name string         `json:"name"`
		Ph   string         `json:"ph"`
		TS   float64        `json:"ts"`
		PID  int            `json:"pid"`
		TID  int            `json:"tid"`
		Args map[string]any `json:"args"`
	}
	events := []any{meta{Name: "process_name", Ph: "M", Args: map[string]any{"name": fmt.Sprintf("rankrun ctx %s -> gen %s", rep.Ctx, rep.Gen)}}}
	for _, rr := range rep.Ranks_ {
		events = append(events, meta{Name: "thread_name", Ph: "M", TID: rr.WorldRank,
			Args: map[string]any{"name": fmt.Sprintf("%s rank %d (world %d)", rr.Role, rr.Rank, rr.WorldRank)}})
		for _, ev := range rr.Trace {
			events = append(events, ev)
		}
	}
	b, err := json.Marshal(map[string]any{"traceEvents": events, "displayTimeUnit": "ms"})
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	return nil
}
