package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/jobreport"
	"github.com/rankrun/rankrun/internal/runfiles"
	"github.com/rankrun/rankrun/runspec"
	"go.uber.org/zap"
)

// interruptBounds split mpirun's kill window after a signal (mpirun
// forwards SIGINT and SIGTERM to every rank as SIGTERM and kills what is
// left mpi.KillWindow later, 1 s by default). partial bounds world rank 0's
// wait for the other ranks' partial reports, from its own entry into
// mpiFailed; ack bounds its acknowledgement once it has printed. Each is
// two fifths of the window (400 ms at the default), which leaves the rest
// for the signal to cancel the run, for a receive cut short to be
// withdrawn and for the print. Partial reports that carry a trace are
// large (about 1 MB a rank after 1,000 requests) and on an oversubscribed
// host take longer than 400 ms to arrive: raising the window (mpirun --mca
// odls_base_sigkill_timeout 3) gives them longer. The partial bound stops
// at maxPartial, so a rank killed or frozen keeps the report at most that
// long whatever the window; so does the acknowledgement.
type interruptBounds struct{ partial, ack time.Duration }

// maxPartial caps the wait for partial reports.
const maxPartial = 10 * time.Second

func boundsFor(window time.Duration) interruptBounds {
	b := min(window*2/5, maxPartial)
	return interruptBounds{partial: b, ack: b}
}

// failureBound bounds a failing rank's note to rank 0 (2 KB: it goes
// eagerly, so it is sent at once unless rank 0's MPI is stuck).
const failureBound = 50 * time.Millisecond

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
	w, err := mpi.Init(mpi.Config{Checked: f.CollChecked(), Timeout: f.CollectiveTimeout})
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
	if w.Rank() == 0 {
		// World rank 0 streams its own events as they happen; the other
		// ranks' travel with their reports and are appended at the end.
		if o.streams, err = runfiles.Open(o.trace, o.requests); err != nil {
			// Rank-local: the others are already on their way into the
			// run, so the job ends by abort, not by a Finalize only this
			// rank enters.
			fmt.Fprintf(stderr, "rankrun: %v\n", err)
			w.Abort(2, err)
			return exitError{code: 2}
		}
		if o.streams != nil {
			cfg.Sink = o.streams
		}
		f.NoteSimOnly("mpi", stderr) // once, from world rank 0, as the run starts
	}
	start := time.Now()
	sctx, stop := interruptible(context.Background())
	defer stop()
	ctx, cancel := f.runContext(sctx)
	defer cancel()
	rep, mine, err := executor.RunRank(ctx, w.Comm(), cfg)
	if err != nil {
		return mpiFailed(ctx, w, cfg, f, o, mine, f.runError(ctx, err), time.Since(start), stdout, stderr)
	}
	// Agree on the exit code before rank 0 prints: writing a large report
	// to mpirun's pty can block until mpirun drains it, and peers already
	// waiting in Finalize would keep mpirun from running.
	code := 0
	if w.Rank() == 0 {
		rep.Compute, rep.KVSample, rep.WallPeakRSS = runspec.DescribeCompute(&cfg), f.PayloadScale(), peakRSS()
		rep.Backend, rep.WallSeconds = "mpi", time.Since(start).Seconds()
		if err := o.writeFiles(rep); err != nil {
			fmt.Fprintf(stderr, "rankrun: %v\n", err)
			code = 1
		}
		if !rep.OK() {
			code = 1
		}
	}
	final := w.Finalize(code)
	if w.Rank() != 0 {
		// The ranks agreed the code, world rank 0 among them; it prints
		// the report now and exits with it. mpirun ends the whole job at
		// the first rank that exits non-zero, which would cut the report
		// short mid-line, so the others leave quietly.
		return exitError{code: 0}
	}
	if sayFinish(stderr, (outputs{json: o.json}).finish(ctx, rep, nil, stdout), nil) { // the files are written
		final = max(final, 1)
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
	bounds := boundsFor(mpi.KillWindow())
	bctx, cancel := context.WithTimeout(context.Background(), bounds.partial)
	defer cancel()
	if isInt && w.Rank() != 0 {
		// The partial report, rank 0's acknowledgement and mpirun's kill
		// share one window: this rank leaves only when it ends, however
		// late rank 0 collects. A rank that exits first ends the teardown
		// at once, and mpirun kills rank 0 before it has read rank 0's
		// report; leaving when the acknowledgement was 800 ms late lost the
		// whole report about one run in five on an idle 2-core machine
		// (CI saw it). A send still pending when rank 0 starts collecting
		// goes through while it collects (bounds.partial). A frozen rank 0
		// keeps this rank the whole window, bounds.partial+bounds.ack+
		// drainBound, unless mpirun's own kill (mpi.KillWindow after its
		// signal) comes first.
		wctx, wcancel := context.WithTimeout(context.Background(), bounds.partial+bounds.ack+drainBound)
		defer wcancel()
		_ = jobreport.SendPartial(wctx, w.Comm(), mine)
		<-wctx.Done()
		return exitError{code: code}
	}
	fmt.Fprintf(stderr, "rankrun: world rank %d: %v\n", w.Rank(), o.withDumps(err))
	var te *comm.TimeoutError
	if errors.As(err, &te) {
		fmt.Fprintf(stderr, "flight recorder:\n%s", te.FlightLog())
	}
	if !isInt && w.Rank() != 0 {
		// One report per job, from world rank 0: the abort interrupts it,
		// and it reports this error with what the ranks measured.
		// Bounded short: a frozen rank 0 must not delay the abort.
		nctx, ncancel := context.WithTimeout(bctx, failureBound)
		_ = jobreport.SendFailure(nctx, w.Comm(), err)
		ncancel()
		w.Abort(code, err)
	}
	var rep *executor.Report
	done := func(context.Context) {}
	if isInt {
		rep, done = jobreport.Collect(bctx, w.Comm(), cfg, mine, err, elapsed, bounds.partial)
	} else {
		rep = executor.Partial(cfg, []executor.RankEnd{{WorldRank: w.Rank(), Report: mine, Err: err}}, err, elapsed)
	}
	rep.Backend, rep.WallSeconds, rep.Compute = "mpi", elapsed.Seconds(), runspec.DescribeCompute(&cfg)
	rep.WallPeakRSS = peakRSS()
	rep.KVSample = f.PayloadScale()
	if !isInt {
		f.markError(ctx, rep, err)
	} else if rep.Error.Kind != "interrupted" {
		code = 1 // a rank failed: its abort interrupted this one
	}
	o.brief = isInt
	sayFinish(stderr, o.finish(ctx, rep, err, stdout), err) // err is printed already
	dctx, dcancel := context.WithTimeout(context.Background(), bounds.ack)
	defer dcancel()
	done(dctx)
	if isInt {
		kctx, kcancel := context.WithTimeout(context.Background(), drainBound)
		defer kcancel()
		<-kctx.Done() // mpirun's kill, or the end of drainBound
		return exitError{code: code}
	}
	w.Abort(code, err)
	return exitError{code: code}
}

// drainBound is how long an interrupted world rank 0 leaves mpirun to
// forward what it printed before it exits; the other ranks' window ends
// drainBound after their partial report's bounds (interruptBounds).
// A rank signalled directly (not through mpirun) then exits without
// MPI_Finalize, and mpirun ends the job. A rank that exits or aborts at
// once ends the teardown before mpirun has read rank 0's report (it was
// cut at ~10 KB, or lost); mpirun's own SIGKILL, mpi.KillWindow after it
// forwarded the signal, comes first. Interrupted ranks never call
// MPI_Abort: in a job that a rank's abort is already tearing down, a
// second abort could hang (a frozen rank 0 then kept the job for 18 s
// instead of 6).
const drainBound = 3 * time.Second

// sayFinish prints what the error of outputs.finish adds to printed, the
// run error already on stderr (nil: none): an exit message (an interrupt,
// a report with errors), or what else failed (the trace, the records,
// stdout). It reports whether something else failed.
func sayFinish(stderr io.Writer, ferr, printed error) bool {
	var ee exitError
	if ferr == nil {
		return false
	}
	if errors.As(ferr, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "rankrun: %s\n", ee.msg)
		}
		return false
	}
	msg := ferr.Error()
	if printed != nil { // finish joins the run error and its own
		msg = strings.TrimSpace(strings.TrimPrefix(msg, printed.Error()))
	}
	if msg == "" {
		return false
	}
	fmt.Fprintf(stderr, "rankrun: %s\n", msg)
	return true
}
