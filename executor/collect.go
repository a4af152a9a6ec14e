package executor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/topology"
)

// reportChunk bounds one message of a rank report on its way to world rank
// 0. A report's summary is small and bounded (sketches, counters), but the
// opt-in parts (trace events, request records) grow with the run: they
// travel in pieces, so no receive buffer has to guess their size.
const reportChunk = 1 << 20

// collect sends every rank's report to world rank 0, which merges them.
func collect(ctx context.Context, world, ctl comm.Comm, cfg *Config, rep RankReport, t0 time.Time) (*Report, error) {
	if world.Rank() != 0 {
		b, err := json.Marshal(rep)
		if err != nil {
			return nil, err
		}
		return nil, sendReport(ctx, ctl, b, tagReport, tagChunk)
	}
	reps := []RankReport{rep}
	for range world.Size() - 1 {
		src, b, err := recvReport(ctx, ctl, comm.AnySource, tagReport, tagChunk)
		if err != nil {
			return nil, fmt.Errorf("executor: collecting rank reports: %w", err)
		}
		var r RankReport
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("executor: report of world rank %d: %w", src, err)
		}
		reps = append(reps, r)
	}
	slices.SortFunc(reps, func(a, b RankReport) int { return a.WorldRank - b.WorldRank })
	return buildReport(cfg, reps, clock.Since(cfg.Clock, t0)), nil
}

// sendReport sends b to world rank 0: its length, then its pieces, in
// order (messages of one pair and tag never overtake each other).
func sendReport(ctx context.Context, ctl comm.Comm, b []byte, tagLen, tagPiece int) error {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	if err := sendWait(ctx, ctl, n[:], tagLen); err != nil {
		return err
	}
	for off := 0; off < len(b); off += reportChunk {
		if err := sendWait(ctx, ctl, b[off:min(off+reportChunk, len(b))], tagPiece); err != nil {
			return err
		}
	}
	return nil
}

func sendWait(ctx context.Context, ctl comm.Comm, b []byte, tag int) error {
	q, err := ctl.Isend(b, 0, tag)
	if err != nil {
		return err
	}
	_, err = q.Wait(ctx)
	return err
}

// recvReport receives one rank's report from src (or whichever rank sends
// first).
func recvReport(ctx context.Context, ctl comm.Comm, src, tagLen, tagPiece int) (int, []byte, error) {
	var n [8]byte
	st, err := recvWait(ctx, ctl, n[:], src, tagLen)
	if err != nil {
		return -1, nil, err
	}
	if st.Len != len(n) {
		return st.Source, nil, fmt.Errorf("world rank %d: a %d-byte report header", st.Source, st.Len)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > 1<<40 {
		return st.Source, nil, fmt.Errorf("world rank %d: a report of %d bytes", st.Source, size)
	}
	b := make([]byte, size)
	for off := 0; off < len(b); {
		piece, err := recvWait(ctx, ctl, b[off:min(off+reportChunk, len(b))], st.Source, tagPiece)
		if err != nil {
			return st.Source, nil, err
		}
		if piece.Len == 0 {
			return st.Source, nil, fmt.Errorf("world rank %d: an empty report piece", st.Source)
		}
		off += piece.Len
	}
	return st.Source, b, nil
}

func recvWait(ctx context.Context, ctl comm.Comm, b []byte, src, tag int) (comm.Status, error) {
	q, err := ctl.Irecv(b, src, tag)
	if err != nil {
		return comm.Status{}, err
	}
	st, err := q.Wait(ctx)
	if err != nil {
		_ = q.Cancel()
	}
	return st, err
}

// Tags of partial reports on the world communicator itself (the control
// communicator is gone when a run fails): below the transceiver's data
// tags, apart from its control tag.
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
// (CollectPartial) names this error, not the teardown. Bounded by ctx.
func SendFailure(ctx context.Context, world comm.Comm, err error) error {
	note, jerr := json.Marshal(RunError{Kind: ErrorKind(err), Message: err.Error(), Ranks: []int{world.Rank()}})
	if jerr != nil || len(note) > failureNote {
		msg := err.Error()
		note, _ = json.Marshal(RunError{Kind: ErrorKind(err), Message: msg[:min(len(msg), failureNote/2)] + "...", Ranks: []int{world.Rank()}})
	}
	return sendWait(ctx, world, note, tagFailure)
}

// SendPartial sends this rank's report, as far as it got, to world rank 0
// after an interrupt (every rank of an mpirun job is signalled), then
// waits for rank 0 to say it has printed the partial report, so the job
// does not end under it. ctx bounds both.
func SendPartial(ctx context.Context, world comm.Comm, rep RankReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	if err := sendReport(ctx, world, b, tagPartial, tagPartialPiece); err != nil {
		return fmt.Errorf("executor: partial report: %w", err)
	}
	var ack [1]byte
	_, err = recvWait(ctx, world, ack[:], 0, tagPartialDone)
	return err
}

// CollectPartial is world rank 0's side of SendPartial: it receives the
// other ranks' reports until every one has arrived or ctx ends, and builds
// the partial report of a run that ended on runErr. The caller bounds ctx
// (a core takes no deadline of its own from package context): wait is that
// bound, named for a rank that sent no report. Done acknowledges the ranks
// it heard from once the report is out. The reports come one at a time,
// on this goroutine: a rank under the sim backend may start no goroutines
// that use its communicator.
func CollectPartial(ctx context.Context, world comm.Comm, cfg Config, mine RankReport, runErr error, elapsed, wait time.Duration) (*Report, func(context.Context)) {
	cfg.Defaults()
	out := newRankOutcomes(world.Size())
	out.keep(context.Background(), 0, mine, runErr)
	var heard []int
	for range world.Size() - 1 {
		src, b, err := recvReport(ctx, world, comm.AnySource, tagPartial, tagPartialPiece)
		if err != nil {
			break // ranks that did not answer in time are left out
		}
		var r RankReport
		if json.Unmarshal(b, &r) == nil && src > 0 && src < world.Size() {
			out.keep(ctx, src, r, context.Canceled)
			heard = append(heard, src)
		}
	}
	rep := out.partial(&cfg, runErr, elapsed.Seconds())
	applyFailures(ctx, world, rep, len(heard) < world.Size()-1)
	rep.noteMissing(&cfg, world.Size(), heard, wait)
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
func (r *Report) noteMissing(cfg *Config, size int, heard []int, wait time.Duration) {
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
func applyFailures(ctx context.Context, world comm.Comm, rep *Report, missing bool) {
	if !missing {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		cancel() // each receive tests once, then gives up
	}
	buf := make([]byte, failureNote)
	for {
		st, err := recvWait(ctx, world, buf, comm.AnySource, tagFailure)
		if err != nil {
			return
		}
		var re RunError
		if json.Unmarshal(buf[:st.Len], &re) != nil {
			continue
		}
		if rep.Error == nil || rep.Error.Kind == "interrupted" {
			rep.Error = &RunError{Kind: re.Kind, Message: re.Message, Ranks: []int{}}
			rep.Errors = rep.Errors[:max(0, len(rep.Errors)-1)] // the interrupt's own line
		}
		rep.Error.Ranks = append(rep.Error.Ranks, st.Source)
		rep.Errors = append(rep.Errors, fmt.Sprintf("world rank %d: %s", st.Source, re.Message))
	}
}
