package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/executor"
)

// partialBound bounds the exchange of partial reports after an interrupt.
// mpirun forwards SIGINT and SIGTERM to every rank as SIGTERM and kills
// what is left a second later (odls_base_sigkill_timeout, default 1 s):
// the report must be out before then.
const partialBound = 600 * time.Millisecond

// runMPI runs this process's rank of an mpirun job. Rank 0 prints the
// report. A failing rank prints what it measured with its error and aborts
// the job, so mpirun ends non-zero within seconds instead of leaving its
// peers waiting. After a signal (mpirun sends it to every rank) the ranks
// send their partial reports to rank 0, which prints one partial report.
func runMPI(cfg executor.Config, f runFlags, o outputs, stdout, stderr io.Writer) error {
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
	start := time.Now()
	sctx, stop := interruptible(context.Background())
	defer stop()
	ctx, cancel := f.runContext(sctx)
	defer cancel()
	var mine executor.RankReport
	rep, err := executor.RunRankPartial(ctx, w.Comm(), cfg, func(rr executor.RankReport, _ error) { mine = rr })
	if err != nil {
		return mpiFailed(ctx, w, cfg, f, o, mine, f.runError(ctx, err), time.Since(start), stdout, stderr)
	}
	// Agree on the exit code before rank 0 prints: writing a large report
	// to mpirun's pty can block until mpirun drains it, and peers already
	// waiting in Finalize would keep mpirun from running.
	code := 0
	if w.Rank() == 0 {
		if err := o.writeFiles(rep); err != nil {
			fmt.Fprintf(stderr, "rankrun: %v\n", err)
			code = 1
		}
		if !rep.OK() {
			code = 1
		}
	}
	final := w.Finalize(code)
	if w.Rank() == 0 {
		if err := (outputs{json: o.json}).finish(ctx, rep, nil, stdout); err != nil { // the files are written
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

// mpiFailed ends a rank whose run failed. Interrupted: rank 0 gathers the
// other ranks' partial reports (bounded), prints one report and aborts the
// job with 128 + the signal; the others send theirs and wait for it. Any
// other error: this rank prints what it measured with the error (its own
// figures: its peers are still running and are ended by the abort).
func mpiFailed(ctx context.Context, w *mpi.World, cfg executor.Config, f runFlags, o outputs, mine executor.RankReport, err error,
	elapsed time.Duration, stdout, stderr io.Writer) error {
	ie, isInt := interrupted(ctx, err)
	code := 1
	if isInt {
		code = ie.code()
	}
	bctx, cancel := context.WithTimeout(context.Background(), partialBound)
	defer cancel()
	if isInt && w.Rank() != 0 {
		_ = executor.SendPartial(bctx, w.Comm(), mine)
		w.Abort(code, err)
		return exitError{code: code}
	}
	fmt.Fprintf(stderr, "rankrun: world rank %d: %v\n", w.Rank(), err)
	var te *comm.TimeoutError
	if errors.As(err, &te) {
		fmt.Fprintf(stderr, "flight recorder:\n%s", te.FlightLog())
	}
	var rep *executor.Report
	done := func(context.Context) {}
	if isInt {
		rep, done = executor.CollectPartial(bctx, w.Comm(), cfg, mine, err, elapsed)
	} else {
		rep = executor.PartialOf(cfg, w.Rank(), mine, err, elapsed)
	}
	rep.Backend, rep.WallSeconds = "mpi", elapsed.Seconds()
	f.markError(ctx, rep, err)
	_ = o.finish(ctx, rep, err, stdout)
	done(bctx)
	w.Abort(code, err)
	return exitError{code: code}
}
