package transceiver

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/consensus"
	"github.com/rankrun/rankrun/internal/pause"
)

// WaitEvent sleeps until a communication event of this rank (a request
// posted by it completed), the deadline, or ctx ends; it returns at once
// when the deadline has passed. Backends without completion events (MPI)
// are polled: it returns after a short pause. The executor, which owns the
// transceiver on the same goroutine, waits through it too.
func (t *Transceiver) WaitEvent(ctx context.Context, deadline time.Time) error {
	d := deadline.Sub(t.clk.Now())
	if d <= 0 {
		return ctx.Err()
	}
	if t.notify == nil {
		// No completion events (MPI): KV bytes move only while this
		// process calls into the backend, so while a fragment is on its
		// way, drive it as MPI_Wait would instead of sleeping. Otherwise
		// poll, the longer the quieter this rank has been: a sixteenth of
		// the time since its last event, from 50 us to 250 us, so that a
		// rank idle for long (a GEN rank waiting out its CTX peer's
		// prefill) does not take a third of a core in wake-ups, one in the
		// thick of a transfer still answers within 50 us, and an idle
		// one takes a new request within 250 us (the idle-handover goal
		// under mpirun is p99 < 1 ms).
		if t.progress == nil || !t.bytesMoving() || !t.progress(min(d, 50*time.Microsecond)) {
			gap := min(max(t.clk.Now().Sub(t.activeAt)/16, 50*time.Microsecond), 250*time.Microsecond)
			pause.Poll(min(d, gap))
		}
		return ctx.Err()
	}
	return t.waiter.Wait(ctx, t.notify, deadline)
}

// bytesMoving reports whether a fragment send of a live session is posted
// and not complete, or a fragment receive whose sender said its bytes are
// on their way (KindSending): a receive posted before its CTX peer's
// prefill ended waits for it without spinning the backend.
func (t *Transceiver) bytesMoving() bool {
	for _, s := range t.live {
		for i := range s.frags {
			if fs := &s.frags[i]; fs.posted && !fs.done && (t.cfg.Role == topology.Context || fs.coming) {
				return true
			}
		}
	}
	return false
}

// poll is phase 1: the bounded, rank-local poll. It waits until target of
// this rank's sessions are terminal or interval passes, pumping progress,
// and never enters a collective.
func (t *Transceiver) poll(ctx context.Context, atLeast int, interval time.Duration) time.Duration {
	target := atLeast
	if !t.cfg.Replays.UnclampedPoll {
		// The clamp (seed 000): never wait for more sessions than are held.
		target = min(atLeast, len(t.sessions))
	}
	if target <= 0 {
		t.Pump() // nothing to wait for: one pass, no clock read
		return 0
	}
	start := t.clk.Now()
	deadline := start.Add(interval)
	for {
		t.Pump()
		if target <= 0 || t.terminal >= target {
			break
		}
		if !t.clk.Now().Before(deadline) {
			break
		}
		if t.WaitEvent(ctx, deadline) != nil {
			break
		}
	}
	return clock.Since(t.clk, start)
}

// CheckContextTransferStatus is a CTX status check: a bounded local poll for
// atLeast sessions (clamped), then ready-id and outcome consensus over the
// CTX scope, then the agreed outcomes are applied: leases end and blocks are
// freed. A CTX rank that never sent skips the consensus; the flag is sticky
// and flips on every rank of the group together, so skipping is uniform.
func (t *Transceiver) CheckContextTransferStatus(ctx context.Context, atLeast int) (Result, error) {
	if t.cfg.Role != topology.Context {
		return Result{}, fmt.Errorf("%w: CheckContextTransferStatus on a %s rank", ErrConfig, t.cfg.Role)
	}
	return t.check(ctx, atLeast, t.cfg.SenderWaitSlice, t.cfg.Scope)
}

// CheckGenTransferStatus is the GEN status check. GEN always enters the
// consensus (with an empty vote when it holds nothing): its group needs it.
func (t *Transceiver) CheckGenTransferStatus(ctx context.Context, atLeast int) (Result, error) {
	if t.cfg.Role != topology.Generation {
		return Result{}, fmt.Errorf("%w: CheckGenTransferStatus on a %s rank", ErrConfig, t.cfg.Role)
	}
	return t.check(ctx, atLeast, t.cfg.GenPollInterval, t.cfg.Scope)
}

// CheckStatusOver is a status check (either role) whose consensus runs over
// scope instead of the rank's own. Only the unsafe-idle-reap replay uses
// it, to bring back a check whose collectives span the executor group.
func (t *Transceiver) CheckStatusOver(ctx context.Context, atLeast int, scope []comm.Comm) (Result, error) {
	interval := t.cfg.SenderWaitSlice
	if t.cfg.Role == topology.Generation {
		interval = t.cfg.GenPollInterval
	}
	return t.check(ctx, atLeast, interval, scope)
}

// TerminalHeld counts sessions that are over on this rank but not yet
// reaped by a consensus: their blocks stay pinned until a status check.
func (t *Transceiver) TerminalHeld() int { return t.terminal }

// OldestTerminal is when the session over on this rank the longest (not
// yet reaped) ended; the zero time when none is.
func (t *Transceiver) OldestTerminal() time.Time {
	var oldest time.Time
	for _, s := range t.order {
		if s.state.terminal() && !s.dropped && (oldest.IsZero() || s.terminal.Before(oldest)) {
			oldest = s.terminal
		}
	}
	return oldest
}

// check is phases 1-3. Its results are named so that the deferred count
// of collectives reaches the caller on every return.
func (t *Transceiver) check(ctx context.Context, atLeast int, interval time.Duration, scope []comm.Comm) (res Result, err error) {
	t.stats.StatusChecks++
	res.PollWait = t.poll(ctx, atLeast, interval)
	t.stats.PollWaitTotal += res.PollWait
	t.stats.MaxPollWait = max(t.stats.MaxPollWait, res.PollWait)
	if t.cfg.Role == topology.Context && !t.everSent {
		res.Skipped = true
		return res, nil
	}
	before := t.gather.Collectives()
	defer func() { res.Collectives = int(t.gather.Collectives() - before) }()

	words, err := t.terminalWords()
	if err != nil {
		return res, err
	}
	decided, err := t.gather.AgreeVotes(ctx, scope, words)
	if err != nil {
		return res, fmt.Errorf("transceiver: %s rank %d status consensus: %w", t.cfg.Role, t.cfg.Rank, err)
	}
	if len(decided) == 0 {
		return res, nil
	}
	defer t.compactOrder()
	return res, t.apply(decided, &res)
}

// terminalWords is this rank's contribution to the consensus (phases 2 and
// 3 in one collective): a word per session over on this rank, with its
// state and whether a write of this rank is still in flight, ascending by
// id. A session's terminal state never changes, so one snapshot serves
// both the ready ids and their outcome; the words are kept as sessions
// end (hold), and only the quiesced flags of sessions that ended with a
// write in flight are refreshed.
func (t *Transceiver) terminalWords() (*consensus.Votes, error) {
	if t.unquiesced > 0 {
		t.unquiesced = 0
		for _, w := range t.held.Words() {
			s := t.sessions[request.ID(consensus.WordID(w))]
			if s.inFlight() {
				t.unquiesced++
				continue
			}
			t.held.Put(consensus.Word(consensus.WordID(w), s.vote(), true)) // same id: replaced in place
		}
	}
	return &t.held, nil
}

// apply ends the sessions whose outcome the group agreed and no rank still
// writes (quiesced), in the order cancelled, failed, completed, and lists
// them in res.
func (t *Transceiver) apply(decided []consensus.Decision, res *Result) error {
	now := t.clk.Now()
	for _, pass := range [...]struct {
		agreed consensus.State
		st     State
	}{{consensus.Cancelled, StateCancelled}, {consensus.Failed, StateFailed}, {consensus.Completed, StateTransferred}} {
		for _, d := range decided {
			if d.Status != pass.agreed || !d.Quiesced {
				continue // another pass, or a write is still in flight somewhere: next check
			}
			s := t.sessions[request.ID(d.ID)]
			if s == nil {
				// Cannot happen: an agreed id is over on every rank.
				return fmt.Errorf("transceiver: agreed id %d has no session on %s rank %d", d.ID, t.cfg.Role, t.cfg.Rank)
			}
			reason, relayed := s.why, s.whyRelayed() || t.sentWhole(s)
			if pass.st != s.state && (reason == "" || pass.st == StateCancelled) {
				reason, relayed = fmt.Sprintf("%s on another rank of the group", pass.st), true
			}
			if err := t.finish(s, pass.st); err != nil {
				return err
			}
			res.Reaped = append(res.Reaped, Reaped{ID: s.req.ID, Status: pass.st.status(), Reason: reason, Relayed: relayed, Bytes: s.bytes, Verified: s.verified,
				Started: s.started, Terminal: s.terminal, Reaped: now})
		}
	}
	return nil
}

// finish applies an agreed outcome: the session is forgotten and its lease
// ends, so the caller can release the blocks (CTX: the reap of seed 001;
// GEN: at once for a failed or cancelled transfer, after decoding for a
// completed one). The caller owns the blocks; the transceiver never frees
// one.
func (t *Transceiver) finish(s *session, st State) error {
	switch st {
	case StateTransferred:
		t.stats.Completed++
	case StateFailed:
		t.stats.Failed++
	case StateCancelled:
		t.stats.Cancelled++
	}
	t.dropSession(s)
	t.noteFinished(s.req.ID)
	return t.endLease(s)
}
