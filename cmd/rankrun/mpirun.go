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

// mpiFailed ends a rank whose run failed; the job prints one report, from
// world rank 0. Interrupted (mpirun forwards a signal to every rank, and
// tears the job down with one when a rank aborts): rank 0 gathers the other
// ranks' partial reports (bounded) and prints one brief report; the others
// send theirs. Any other error on a rank other than 0: it sends its error
// to rank 0 and aborts the job, whose teardown interrupts rank 0, which
// reports that error. On rank 0: it prints what it measured with the error.
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
		abortAfterInterrupt(w, code, err)
	}
	fmt.Fprintf(stderr, "rankrun: world rank %d: %v\n", w.Rank(), err)
	var te *comm.TimeoutError
	if errors.As(err, &te) {
		fmt.Fprintf(stderr, "flight recorder:\n%s", te.FlightLog())
	}
	if !isInt && w.Rank() != 0 {
		// One report per job, from world rank 0: the abort interrupts it,
		// and it reports this error with what the ranks measured.
		_ = executor.SendFailure(bctx, w.Comm(), err)
		w.Abort(code, err)
	}
	var rep *executor.Report
	done := func(context.Context) {}
	if isInt {
		rep, done = executor.CollectPartial(bctx, w.Comm(), cfg, mine, err, elapsed)
	} else {
		rep = executor.PartialOf(cfg, w.Rank(), mine, err, elapsed)
	}
	rep.Backend, rep.WallSeconds = "mpi", elapsed.Seconds()
	if !isInt {
		f.markError(ctx, rep, err)
	} else if rep.Error.Kind != "interrupted" {
		code = 1 // a rank failed: its abort interrupted this one
	}
	o.brief = isInt
	_ = o.finish(ctx, rep, err, stdout)
	done(bctx)
	if isInt {
		abortAfterInterrupt(w, code, err)
	}
	w.Abort(code, err)
	return exitError{code: code}
}

// drainBound is how long an interrupted rank leaves mpirun to forward what
// it printed before the rank aborts the job itself. MPI_Abort makes mpirun
// tear the job down and drop output it has not read yet (the report was
// cut at ~10 KB when rank 0 aborted right after printing it); mpirun's own
// SIGKILL, one second after it forwarded the signal, comes first and finds
// the output read.
const drainBound = 3 * time.Second

// abortAfterInterrupt ends an interrupted rank: mpirun's kill ends it
// within the bound; a rank signalled directly (not through mpirun) aborts
// the job at the bound. It does not return.
func abortAfterInterrupt(w *mpi.World, code int, err error) {
	t := time.NewTimer(drainBound)
	<-t.C
	w.Abort(code, err)
}
