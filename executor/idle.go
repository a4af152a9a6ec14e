package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/transceiver"
)

// idleState is what the idle waits carry between iterations.
type idleState struct {
	tickReq comm.Request // member: the leader's tick, posted
	tickBuf []byte
	wakeReq comm.Request // leader: a member's transfer ended
	wakeBuf []byte
	// heldSeen is how many sessions were over-but-unreaped after the last
	// status check: more than that means a transfer ended since, and an
	// idle rank should get the group to iterate and reap it.
	heldSeen int
	// drained: this iteration's coordinated drain reaped sends (sync CTX,
	// at the termination point): the group may be done, and the next
	// iteration's agreement says so at once, not a tick later. Each such
	// iteration ends at least one session, so it cannot spin.
	drained   bool
	wakesSent int64 // member: wakes sent to the leader
	wakesRecv int64 // leader: wakes received
	wakeSum   [1]int64
	wasIdle   bool
	idleSince int64     // when the current idle stretch began (ns since t0)
	probedAt  time.Time // the last liveness probe (leaderWait)
}

// idleWait blocks an idle rank until there is something to do: for the
// leader an arrival, a message or a transfer event; for the other ranks the
// leader's tick. It returns how long it waited. Transfers keep moving: every
// event is pumped.
func (l *loop) idleWait(ctx context.Context) (time.Duration, error) {
	if l.leader {
		return l.leaderWait(ctx)
	}
	return l.memberWait(ctx)
}

// leaderWait waits for work, then ticks every member.
func (l *loop) leaderWait(ctx context.Context) (time.Duration, error) {
	if err := l.probeIfStuck(); err != nil {
		return 0, err
	}
	start := l.clk.Now()
	deadline := start.Add(l.cfg.IdleTick)
	if l.cfg.Replays.On(UnclampedPoll) && l.isCtx() && l.cfg.Mode == transceiver.Async {
		// The old loop had no event-driven wait: its idle status check
		// was the wait. Iterate again at once (members still get a tick).
		// Async only, as the replay's check: an idle sync CTX checks
		// nothing, and iterating at once would spin at one instant (in
		// simulation, forever).
		deadline = start
	}
	if at, ok := l.router.nextArrival(); ok && l.t0.Add(at).Before(deadline) {
		deadline = l.t0.Add(at)
	}
	if due, ok := l.tr.NextHeldAck(); ok && due.Before(deadline) {
		deadline = due // a delay-ack fault's acknowledgement falls due
	}
	if l.wakeReq == nil && l.g.exec.Size() > 1 {
		q, err := l.g.exec.Irecv(l.wakeBuf, comm.AnySource, tagWake)
		if err != nil {
			return 0, fmt.Errorf("executor: wake receive: %w", err)
		}
		l.wakeReq = q
	}
	// The end of the workload ends the wait as any event does: the last
	// finish the router hears, or a drain that reaped, makes the group's
	// termination decidable.
	routerDone := l.router.allDone()
	defer func() { l.drained = false }()
	for {
		if err := l.pumpCtl(); err != nil {
			return 0, err
		}
		l.tr.Pump()
		woken := !routerDone && l.router.allDone() || l.drained
		if l.wakeReq != nil {
			if _, done, err := l.wakeReq.Test(); done {
				l.wakeReq, woken = nil, true
				l.wakesRecv++
				if err != nil {
					return 0, fmt.Errorf("executor: wake: %w", err)
				}
			}
		}
		if woken || l.tr.TerminalHeld() > l.heldSeen || len(l.inbox) > 0 || l.router.releasable(l.now()) || !l.clk.Now().Before(deadline) {
			break
		}
		if err := l.tr.WaitEvent(ctx, deadline); err != nil {
			return 0, err
		}
	}
	for r := 1; r < l.g.exec.Size(); r++ {
		q, err := l.g.exec.Isend([]byte{1}, r, tagTick)
		if err != nil {
			return 0, fmt.Errorf("executor: tick: %w", err)
		}
		l.outbox = append(l.outbox, q)
	}
	return clock.Since(l.clk, start), nil
}

// memberWait waits for the leader's tick, waking the leader when one of
// this rank's transfers ends.
func (l *loop) memberWait(ctx context.Context) (time.Duration, error) {
	start := l.clk.Now()
	if l.tickReq == nil {
		q, err := l.g.exec.Irecv(l.tickBuf, 0, tagTick)
		if err != nil {
			return 0, fmt.Errorf("executor: tick receive: %w", err)
		}
		l.tickReq = q
	}
	signalled := l.heldSeen
	// The leader ticks as soon as its own idle wait ends (at most an idle
	// tick, or an event), or once its own bounded waits end: a wait on a
	// peer (the peer bound) and the liveness probe (the stall inspector's
	// deadline). Waiting longer than both means it is stalled or gone, and
	// this rank says so instead of waiting forever; a leader that waits on
	// a stalled rank names that rank first (over a network, with timers of
	// equal length, the member's error won the race and blamed the leader).
	bound := start.Add(l.peerBound + comm.InspectTimeout)
	for {
		l.tr.Pump()
		if held := l.tr.TerminalHeld(); held > signalled {
			// One of my transfers ended: ask the leader to iterate.
			signalled = held
			q, err := l.g.exec.Isend([]byte{1}, 0, tagWake)
			if err != nil {
				return 0, fmt.Errorf("executor: wake: %w", err)
			}
			l.outbox = append(l.outbox, q)
			l.wakesSent++
		}
		if _, done, err := l.tickReq.Test(); done {
			l.tickReq = nil
			if err != nil {
				return 0, fmt.Errorf("executor: tick: %w", err)
			}
			return clock.Since(l.clk, start), nil
		}
		now := l.clk.Now()
		if !now.Before(bound) {
			return 0, l.peerTimeout(0, "the leader's idle tick", start)
		}
		wake := now.Add(l.cfg.IdleTick)
		if bound.Before(wake) {
			wake = bound
		}
		if err := l.tr.WaitEvent(ctx, wake); err != nil {
			return 0, err
		}
	}
}

// probeIfStuck is the liveness probe of an idle leader: when its group
// has work outstanding (requests to come or in flight) and nothing has
// progressed for the peer bound, every world rank is asked through the
// backend's stall inspector whether it is alive, at most once per bound. A
// rank that does not answer (frozen, dead, cut off) is named and ends the
// run, instead of the group waiting for work that cannot come; if every
// rank answers, the group is merely slow and waits on.
func (l *loop) probeIfStuck() error {
	now := l.clk.Now()
	if now.Sub(l.progressAt) < l.peerBound || now.Sub(l.probedAt) < l.peerBound || !l.outstanding() {
		return nil
	}
	l.probedAt = now
	missing, peers := comm.Unreachable(l.world)
	if len(missing) == 0 {
		return nil
	}
	return &comm.TimeoutError{Group: l.world.Name(), Self: l.world.Rank(),
		Waiting: comm.Entry{Rank: l.world.Rank(), Kind: flight.KindRecv, Site: "executor: progress of the group's work"},
		Missing: missing, Peers: peers, Bound: l.peerBound,
		Cause: fmt.Errorf("%s saw no progress for %v with work outstanding, and asked every rank", l.g.who(),
			now.Sub(l.progressAt).Round(time.Millisecond))}
}

// outstanding reports whether this rank's group still has work to see
// through: requests to come, waiting or half prefilled, or transfers in
// flight.
func (l *loop) outstanding() bool {
	return l.seen < l.expected || len(l.waiting) > 0 || len(l.unfinished) > 0 || l.tr.Sessions() > 0 || !l.router.allDone() || l.pending()
}

// drainWakes receives every wake a member sent, so that no send is left
// unmatched when the group ends. Collective: the group sums what was sent.
func (l *loop) drainWakes(ctx context.Context) error {
	if l.g.exec.Size() == 1 {
		return nil
	}
	l.wakeSum[0] = l.wakesSent
	if err := l.g.exec.AllreduceInt64(ctx, comm.Sum, l.wakeSum[:], l.wakeSum[:]); err != nil {
		return fmt.Errorf("executor: termination: %w", err)
	}
	if !l.leader {
		return nil
	}
	for l.wakesRecv < l.wakeSum[0] {
		if l.wakeReq == nil {
			q, err := l.g.exec.Irecv(l.wakeBuf, comm.AnySource, tagWake)
			if err != nil {
				return err
			}
			l.wakeReq = q
		}
		if _, err := l.waitPeer(ctx, l.wakeReq, comm.AnySource, fmt.Sprintf("%d member wakes", l.wakeSum[0]-l.wakesRecv)); err != nil {
			return fmt.Errorf("executor: draining member wakes: %w", err)
		}
		l.wakeReq = nil
		l.wakesRecv++
	}
	return nil
}

// waitPeer waits for q, a message to or from peer (a group rank, or
// comm.AnySource) that the peer must take part in, for at most the peer
// bound, pumping transfers meanwhile. Past the bound it returns a
// collective timeout naming the peer: a stalled or dead rank is named, not
// waited for.
func (l *loop) waitPeer(ctx context.Context, q comm.Request, peer int, what string) (comm.Status, error) {
	start := l.clk.Now()
	bound := start.Add(l.peerBound)
	for {
		st, done, err := q.Test()
		if done {
			return st, err
		}
		if !l.clk.Now().Before(bound) {
			return st, l.peerTimeout(peer, what, start)
		}
		l.tr.Pump()
		if err := l.tr.WaitEvent(ctx, bound); err != nil {
			return st, err
		}
	}
}

// peerTimeout is the error of a point-to-point wait on peer that ran past
// the peer bound (what: what was awaited). It names ranks as processes
// (world ranks beside group ranks) and asks the stall inspector which
// ranks of the group do not answer: those are the ones to look at (a
// frozen or dead process), whatever this rank was waiting for.
func (l *loop) peerTimeout(peer int, what string, since time.Time) error {
	te := &comm.TimeoutError{Group: l.g.exec.Name(), Self: l.g.exec.Rank(),
		Waiting:    comm.Entry{Rank: l.g.exec.Rank(), Kind: flight.KindRecv, Site: "executor: " + what},
		Bound:      l.peerBound,
		WorldRanks: comm.PropsOf(l.g.exec).WorldRanks,
		Cause:      fmt.Errorf("%s waited %v", l.g.who(), clock.Since(l.clk, since).Round(time.Millisecond))}
	if peer != comm.AnySource {
		te.Missing = []int{peer}
	}
	if missing, peers := comm.Unreachable(l.g.exec); len(peers) > 0 {
		te.Peers = peers
		if len(missing) > 0 {
			te.Missing = missing
		}
	}
	return te
}
