// Package jobreport is how the ranks of an mpirun job, each a process of
// its own, still end with one report after a failure: a failing rank sends
// world rank 0 its error before it aborts the job (SendFailure); after an
// interrupt every other rank sends what it measured (SendPartial), and
// world rank 0 merges what came within its bound (Collect), naming the
// ranks that sent nothing. An in-process or simulated run needs none of
// this (every rank's outcome is in one process: executor.Run).
//
// It owns the messages' tags on the world communicator and the rules for
// what a partial report says; the report itself is executor's.
package jobreport

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/pieces"
	"github.com/rankrun/rankrun/topology"
)

// Tags of partial reports on the world communicator itself (the run's own
// control communicator is gone when a run fails): below the transceiver's
// data tags, apart from its control tag.
const (
	tagPartial      = 2
	tagPartialPiece = 3
	tagPartialDone  = 4
	tagFailure      = 5
)

// failureNote bounds the error a failing rank sends to world rank 0: small
// enough to go eagerly (the rank aborts the job right after).
const failureNote = 2048

// SendFailure tells world rank 0 why this rank fails, before it aborts the
// job: mpirun's teardown then interrupts rank 0, whose partial report
// (Collect) names this error, not the teardown. Bounded by ctx.
func SendFailure(ctx context.Context, world comm.Comm, err error) error {
	note, jerr := json.Marshal(executor.RunError{Kind: executor.ErrorKind(err), Message: err.Error(), Ranks: []int{world.Rank()}})
	if jerr != nil || len(note) > failureNote {
		msg := err.Error()
		note, _ = json.Marshal(executor.RunError{Kind: executor.ErrorKind(err), Message: msg[:min(len(msg), failureNote/2)] + "...", Ranks: []int{world.Rank()}})
	}
	return pieces.SendWait(ctx, world, note, 0, tagFailure)
}

// SendPartial sends this rank's report, as far as it got, to world rank 0
// after an interrupt (every rank of an mpirun job is signalled), then
// waits for rank 0 to say it has printed the partial report, so the job
// does not end under it. ctx bounds both.
func SendPartial(ctx context.Context, world comm.Comm, rep executor.RankReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	if err := pieces.Send(ctx, world, 0, b, tagPartial, tagPartialPiece); err != nil {
		return fmt.Errorf("jobreport: partial report: %w", err)
	}
	var ack [1]byte
	_, err = pieces.RecvWait(ctx, world, ack[:], 0, tagPartialDone)
	return err
}

// Collect is world rank 0's side of SendPartial: it receives the other
// ranks' reports until every one has arrived or ctx ends, and builds the
// partial report of a run that ended on runErr. The caller bounds ctx (a
// core takes no deadline of its own from package context): wait is that
// bound, named for a rank that sent no report. Done acknowledges the ranks
// it heard from once the report is out. The reports come one at a time,
// on this goroutine: a rank under the sim backend may start no goroutines
// that use its communicator.
func Collect(ctx context.Context, world comm.Comm, cfg executor.Config, mine executor.RankReport, runErr error, elapsed, wait time.Duration) (*executor.Report, func(context.Context)) {
	cfg.Defaults()
	ends := []executor.RankEnd{{WorldRank: 0, Report: mine, Err: runErr}}
	var heard []int
	for range world.Size() - 1 {
		src, b, err := pieces.Recv(ctx, world, comm.AnySource, tagPartial, tagPartialPiece)
		if err != nil {
			break // ranks that did not answer in time are left out
		}
		var r executor.RankReport
		if json.Unmarshal(b, &r) == nil && src > 0 && src < world.Size() {
			// Each was interrupted: its end follows from the signal.
			ends = append(ends, executor.RankEnd{WorldRank: src, Report: r, Err: context.Canceled})
			heard = append(heard, src)
		}
	}
	rep := executor.Partial(cfg, ends, runErr, elapsed)
	applyFailures(ctx, world, rep, len(heard) < world.Size()-1)
	noteMissing(rep, &cfg, world.Size(), heard, wait)
	done := func(ctx context.Context) {
		for _, r := range heard {
			if q, err := world.Isend([]byte{1}, r, tagPartialDone); err == nil {
				_, _ = q.Wait(ctx)
			}
		}
	}
	return rep, done
}

// noteMissing names the ranks whose partial reports never came (besides
// world rank 0's own, heard lists those that did): after an interrupt, in
// the error, for a rank that ended before the signal (mpirun's SIGTERM
// after a rank was killed) is what ended the run. A missing GEN leader's
// finished requests are not counted: the counts are then a lower bound,
// and the report says so.
func noteMissing(r *executor.Report, cfg *executor.Config, size int, heard []int, wait time.Duration) {
	r.MissingRanks = nil
	for w := 1; w < size; w++ {
		if !slices.Contains(heard, w) {
			r.MissingRanks = append(r.MissingRanks, w)
		}
	}
	if len(r.MissingRanks) == 0 {
		return
	}
	var leaders []int
	for _, w := range r.MissingRanks {
		if role, rank := topology.RoleOf(cfg.Ctx, cfg.Gen, w); role == topology.Generation && cfg.Gen.ExecutorGroup(rank)[0] == rank {
			leaders = append(leaders, w)
		}
	}
	if len(leaders) > 0 {
		r.CountsPartial = fmt.Sprintf("a lower bound: GEN leader world ranks %v, which count the requests they finish, sent no report", leaders)
	}
	if r.Error == nil || r.Error.Kind != "interrupted" {
		return // a failing rank's own error says what happened
	}
	old := r.Error.Message
	r.Error.Message += fmt.Sprintf("; world ranks %v sent no partial report: they ended before the signal (killed or crashed) "+
		"or did not answer within %v (frozen or starved); mpirun's own message names how", r.MissingRanks, wait)
	r.Error.Ranks = slices.Clone(r.MissingRanks)
	for i, e := range r.Errors {
		if e == old {
			r.Errors[i] = r.Error.Message
		}
	}
}

// applyFailures makes the partial report name the error a failing rank
// sent (SendFailure) instead of the interrupt it caused, if one came. A
// failing rank sends no partial report, so notes are waited for (until
// ctx ends) only when some rank is missing; with every report in, only
// notes that have already arrived are read, and rank 0 prints at once.
func applyFailures(ctx context.Context, world comm.Comm, rep *executor.Report, missing bool) {
	if !missing {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		cancel() // each receive tests once, then gives up
	}
	buf := make([]byte, failureNote)
	for {
		st, err := pieces.RecvWait(ctx, world, buf, comm.AnySource, tagFailure)
		if err != nil {
			return
		}
		var re executor.RunError
		if json.Unmarshal(buf[:st.Len], &re) != nil {
			continue
		}
		if rep.Error == nil || rep.Error.Kind == "interrupted" {
			rep.Error = &executor.RunError{Kind: re.Kind, Message: re.Message, Ranks: []int{}}
			rep.Errors = rep.Errors[:max(0, len(rep.Errors)-1)] // the interrupt's own line
		}
		rep.Error.Ranks = append(rep.Error.Ranks, st.Source)
		rep.Errors = append(rep.Errors, fmt.Sprintf("world rank %d: %s", st.Source, re.Message))
	}
}
