package executor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/gpu"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// loop is one rank's executor: the per-iteration intake, admission,
// compute, transfer progress, idle policy and metrics. It is owned by one
// goroutine.
type loop struct {
	cfg    *Config
	world  comm.Comm
	ctl    comm.Comm // executor messages (a split of the world)
	g      *transceiver.Groups
	tr     *transceiver.Transceiver
	pool   *gpu.Pool
	shard  topology.Shard
	layout topology.Layout
	faults rankFaults
	log    *zap.Logger
	t0     time.Time
	clk    clock.Clock
	waiter clock.Waiter // the loop goroutine's timed waits
	// peerBound is how long a rank waits for a message a peer must send
	// (the leader's tick, member wakes, the end of its own sends): the
	// group's collective timeout.
	peerBound time.Duration

	leader   bool
	myDP     int
	expected int // requests this executor group handles
	seen     int // requests taken in so far
	waiting  []rec
	inbox    []rec
	batchBuf []byte
	gen      map[uint64]*genReq // GEN: admitted, receiving or decoding
	order    []uint64           // GEN: admission order
	recs     map[uint64]*RequestRecord
	// reportedFailures: local failures already reported by the
	// local-error-collective replay.
	reportedFailures int
	stalled          map[uint64]bool

	ctlReq  comm.Request
	ctlBuf  []byte
	tickReq comm.Request
	tickBuf []byte
	wakeReq comm.Request // leader: a member's transfer ended
	wakeBuf []byte
	// heldSeen is how many sessions were over-but-unreaped after the last
	// status check: more than that means a transfer ended since, and an
	// idle rank should get the group to iterate and reap it.
	heldSeen  int
	wakesSent int64 // member: wakes sent to the leader
	wakesRecv int64 // leader: wakes received
	// outcomes: (id, state) pairs this rank's status check agreed this
	// iteration, shared over an attention-DP executor group.
	outcomes   []int64
	outcomeBuf comm.Gathered
	tally      outcomeTally // GEN: reports of each request's holders, until all are in
	audit      bool         // checked mode: audit decisions that choose the next collective
	auditBuf   [2]int64
	outbox     []comm.Request
	router     *router
	wasIdle    bool
	idleSince  int64     // when the current idle stretch began (ns since t0)
	progress   time.Time // last admission, reap or completion
	fitBuf     [1]int64
	rep        RankReport
}

type genReq struct {
	r         rec
	admitted  time.Time
	received  bool // transfer agreed complete
	generated int
	failed    string
	state     string
}

// router runs on world rank 0: it releases the workload's requests and
// routes each to its CTX group leader, and counts finished requests.
type router struct {
	reqs    []Req
	next    int
	done    int
	arrival Arrival
	freed   []int64 // closed loop: when each finished request freed a slot
}

func (l *loop) now() int64 { return clock.Since(l.clk, l.t0).Nanoseconds() }

// sleep waits d on the loop's clock (modelled compute, injected stalls and
// delays: the wait is the work itself, not a wait for progress).
func (l *loop) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return l.waiter.Wait(ctx, nil, l.clk.Now().Add(d))
}

func (l *loop) isCtx() bool { return l.g.Role == transceiver.Context }

// ctxLeaderWorld is the world rank of the CTX executor-group leader for a
// request of CTX DP index dc.
func (l *loop) ctxLeaderWorld(dc int) int {
	if l.cfg.Ctx.AttentionDP {
		return 0
	}
	return dc * l.cfg.Ctx.ReplicaRanks()
}

func (l *loop) genLeaderWorld(dg int) int {
	base := l.cfg.Ctx.Ranks()
	if l.cfg.Gen.AttentionDP {
		return base
	}
	return base + dg*l.cfg.Gen.ReplicaRanks()
}

// mine reports whether this rank holds the KV of a request.
func (l *loop) mine(r rec) bool {
	if l.isCtx() {
		return int(r.CtxDP) == l.myDP
	}
	return int(r.GenDP) == l.myDP
}

func (l *loop) postCtl() error {
	if !l.leader {
		return nil
	}
	q, err := l.ctl.Irecv(l.ctlBuf, comm.AnySource, tagMsg)
	if err != nil {
		return fmt.Errorf("executor: post message receive: %w", err)
	}
	l.ctlReq = q
	return nil
}

func (l *loop) send(dest int, r rec) error {
	q, err := l.ctl.Isend(r.put(nil), dest, tagMsg)
	if err != nil {
		return fmt.Errorf("executor: send %v of request %d to world rank %d: %w", r.Kind, r.ID, dest, err)
	}
	l.outbox = append(l.outbox, q)
	return nil
}

// pumpCtl receives routed, handed-off and done messages (leaders only).
func (l *loop) pumpCtl() error {
	for l.ctlReq != nil {
		st, done, err := l.ctlReq.Test()
		if !done {
			break
		}
		if err != nil {
			return fmt.Errorf("executor: message receive: %w", err)
		}
		r, err := getRec(l.ctlBuf[:st.Len])
		if err != nil {
			return fmt.Errorf("executor: from world rank %d: %w", st.Source, err)
		}
		switch r.Kind {
		case msgRoute, msgHandoff:
			l.inbox = append(l.inbox, r)
		case msgDone:
			if l.router == nil {
				return fmt.Errorf("executor: done message for request %d reached world rank %d, which is not the router", r.ID, l.world.Rank())
			}
			l.router.done++
			// In a closed loop the client sends its next request the
			// moment one finishes, whether or not the router is looking.
			l.router.freed = append(l.router.freed, r.Arrival)
		}
		if err := l.postCtl(); err != nil {
			return err
		}
	}
	return l.pruneOutbox()
}

// pruneOutbox forgets the sends that completed (every rank, every
// iteration: members send wakes, leaders messages and ticks).
func (l *loop) pruneOutbox() error {
	keep := l.outbox[:0]
	for _, q := range l.outbox {
		if _, done, err := q.Test(); !done {
			keep = append(keep, q)
		} else if err != nil {
			return fmt.Errorf("executor: message send: %w", err)
		}
	}
	clear(l.outbox[len(keep):])
	l.outbox = keep
	return nil
}

// release lets the router release the requests that have arrived by now.
func (l *loop) release() error {
	rt := l.router
	if rt == nil {
		return nil
	}
	now := l.now()
	for rt.next < len(rt.reqs) {
		q := rt.reqs[rt.next]
		switch rt.arrival.Kind {
		case Closed:
			if rt.next-rt.done >= rt.arrival.Concurrency {
				return nil
			}
		case Rate, Poisson:
			if q.At.Nanoseconds() > now {
				return nil
			}
		}
		rt.next++
		arrival := now
		switch rt.arrival.Kind {
		case Rate, Poisson:
			arrival = q.At.Nanoseconds()
		case Closed:
			if len(rt.freed) > 0 {
				arrival = min(rt.freed[0], now)
				rt.freed = rt.freed[1:]
			}
		}
		r := rec{Kind: msgRoute, ID: q.ID, Tokens: int64(q.Tokens), Output: int64(q.Output),
			CtxDP: int64((q.ID - 1) % uint64(l.cfg.Ctx.DP)), GenDP: int64((q.ID - 1) % uint64(l.cfg.Gen.DP)), Arrival: arrival}
		if dest := l.ctxLeaderWorld(int(r.CtxDP)); dest == l.world.Rank() {
			l.inbox = append(l.inbox, r)
		} else if err := l.send(dest, r); err != nil {
			return err
		}
	}
	return nil
}

// nextArrival is when the router's next open-loop request arrives (zero:
// none scheduled).
func (l *loop) nextArrival() time.Time {
	rt := l.router
	if rt == nil || rt.next >= len(rt.reqs) || (rt.arrival.Kind != Rate && rt.arrival.Kind != Poisson) {
		return time.Time{}
	}
	return l.t0.Add(rt.reqs[rt.next].At)
}

func (l *loop) routerDone() bool {
	return l.router == nil || (l.router.next == len(l.router.reqs) && l.router.done == len(l.router.reqs))
}

// intake is collective over the executor group: the leader's batch is
// broadcast so every rank appends the same requests in the same order.
func (l *loop) intake(ctx context.Context) (bool, error) {
	routerDone := l.routerDone()
	if l.leader {
		if err := l.pumpCtl(); err != nil {
			return false, err
		}
		if err := l.release(); err != nil {
			return false, err
		}
		routerDone = l.routerDone()
	}
	batch := l.inbox
	if l.g.Executor.Size() > 1 {
		l.batchBuf = encodeBatch(l.batchBuf, routerDone, l.inbox)
		got, err := l.g.Executor.Bcast(ctx, 0, l.batchBuf)
		if err != nil {
			return false, fmt.Errorf("executor: intake: %w", err)
		}
		if !l.leader {
			l.batchBuf = got
		}
		routerDone, batch, err = decodeBatch(got, nil)
		if err != nil {
			return false, err
		}
	}
	l.inbox = l.inbox[:0]
	idleGroup := l.wasIdle && len(l.waiting) == 0 && l.isCtx()
	for _, r := range batch {
		// An idle arrival: the group had been idle (nothing waiting,
		// nothing admitted) since before the request arrived. Every
		// request of a batch that reaches an idle group counts.
		if idleGroup && r.Arrival >= l.idleSince {
			r.IdleArrival = 1
		}
		l.waiting = append(l.waiting, r)
		l.seen++
		if l.faults.exit[r.ID] {
			return false, fmt.Errorf("%w: %s rank %d exits on request %d", ErrInjected, l.g.Role, l.g.Rank, r.ID)
		}
		if d, ok := l.faults.stall[r.ID]; ok && !l.stalled[r.ID] {
			l.stalled[r.ID] = true
			l.log.Warn("injected stall", zap.Uint64("request", r.ID), zap.Duration("for", d))
			if err := l.sleep(ctx, d); err != nil {
				return false, err
			}
		}
	}
	return routerDone, nil
}

// admit decides, from state agreed by the group, how many of the waiting
// requests start now, and allocates their blocks on this rank.
func (l *loop) admit(ctx context.Context) ([]rec, error) {
	if len(l.waiting) == 0 {
		return nil, nil
	}
	// The FIFO prefix that fits this rank's pool.
	free := l.pool.Stats().Free
	fit := 0
	for _, r := range l.waiting {
		need := 0
		if l.mine(r) {
			need = l.shard.BlocksFor(int(r.Tokens))
		}
		if need > free {
			break
		}
		free -= need
		fit++
	}
	if l.cfg.Replays.On(LocalAdmissionGate) && l.g.Executor.Size() > 1 && l.isCtx() {
		if fit == 0 {
			// The old gate: "nothing fits here", so reap first, a
			// status check entered on rank-local state.
			_, err := l.ctxCheck(ctx, 0, false)
			return nil, err
		}
	} else if l.g.Executor.Size() > 1 {
		l.fitBuf[0] = int64(fit)
		if err := l.g.Executor.AllreduceInt64(ctx, comm.Min, l.fitBuf[:], l.fitBuf[:]); err != nil {
			return nil, fmt.Errorf("executor: admission: %w", err)
		}
		fit = int(l.fitBuf[0])
	}
	if fit == 0 {
		// Requests wait and the agreed answer is that none fits: the
		// pools are full (of blocks a reap would free, or of live work).
		l.rep.AdmissionBlocked++
	}
	admitted := append([]rec(nil), l.waiting[:fit]...)
	l.waiting = append(l.waiting[:0], l.waiting[fit:]...)
	for _, r := range admitted {
		if !l.mine(r) || !l.isCtx() {
			continue // GEN allocates in StartReceive
		}
		n := l.shard.BlocksFor(int(r.Tokens))
		if n == 0 {
			continue // under CP a short request may have no block on this rank
		}
		if _, err := l.pool.TryAllocate(request.ID(r.ID), n); err != nil {
			return nil, fmt.Errorf("executor: ctx rank %d admitted request %d but cannot allocate: %w", l.g.Rank, r.ID, err)
		}
	}
	if fit > 0 {
		l.progress = l.clk.Now()
	}
	return admitted, nil
}

// ctxCheck runs a CTX status check and records what it reaped.
func (l *loop) ctxCheck(ctx context.Context, atLeast int, idle bool) (transceiver.Result, error) {
	start := l.now()
	res, err := l.tr.CheckContextTransferStatus(ctx, atLeast)
	if err != nil {
		return res, err
	}
	l.noteCheck(res, idle, start, "ctx status check")
	return res, nil
}

func (l *loop) noteCheck(res transceiver.Result, idle bool, start int64, name string) {
	l.rep.StatusChecks++
	l.heldSeen = l.tr.TerminalHeld()
	if idle {
		l.rep.IdleCheckColl += res.Collectives
		l.rep.IdleReaped += len(res.Reaped)
	}
	for _, x := range res.Reaped {
		l.rep.ReapDelayNs = append(l.rep.ReapDelayNs, x.Reaped.Sub(x.Terminal).Nanoseconds())
		l.progress = l.clk.Now()
		l.traceSpan("transfer", fmt.Sprintf("req %d %s", x.ID, x.State), x.Started.Sub(l.t0).Nanoseconds(), x.Reaped.Sub(l.t0).Nanoseconds(),
			map[string]any{"bytes": x.Bytes, "reason": x.Reason})
	}
	if res.Collectives > 0 || res.PollWait > 100*time.Microsecond {
		l.traceSpan("check", name, start, l.now(), map[string]any{"collectives": res.Collectives, "reaped": len(res.Reaped), "idle": idle})
	}
}

func (l *loop) traceSpan(cat, name string, from, to int64, args map[string]any) {
	if !l.cfg.Trace {
		return
	}
	l.rep.Trace = append(l.rep.Trace, TraceEvent{Name: name, Cat: cat, Ph: "X", TS: float64(from) / 1e3, Dur: float64(to-from) / 1e3,
		PID: 0, TID: l.world.Rank(), Args: args})
}

// idleWait blocks an idle rank until there is something to do: for the
// leader an arrival, a message or a transfer event; for the other ranks the
// leader's tick. It returns how long it waited. Transfers keep moving: every
// event is pumped.
func (l *loop) idleWait(ctx context.Context) (time.Duration, error) {
	start := l.clk.Now()
	deadline := start.Add(l.cfg.IdleTick)
	if l.cfg.Replays.On(UnclampedPoll) && l.isCtx() {
		// The old loop had no event-driven wait: its idle status check
		// was the wait. Iterate again at once (members still get a tick).
		deadline = start
	}
	if next := l.nextArrival(); !next.IsZero() && next.Before(deadline) {
		deadline = next
	}
	if l.leader {
		if l.wakeReq == nil && l.g.Executor.Size() > 1 {
			q, err := l.g.Executor.Irecv(l.wakeBuf, comm.AnySource, tagWake)
			if err != nil {
				return 0, fmt.Errorf("executor: wake receive: %w", err)
			}
			l.wakeReq = q
		}
		for {
			if err := l.pumpCtl(); err != nil {
				return 0, err
			}
			l.tr.Pump()
			woken := false
			if l.wakeReq != nil {
				if _, done, err := l.wakeReq.Test(); done {
					l.wakeReq, woken = nil, true
					l.wakesRecv++
					if err != nil {
						return 0, fmt.Errorf("executor: wake: %w", err)
					}
				}
			}
			if woken || l.tr.TerminalHeld() > l.heldSeen || len(l.inbox) > 0 || l.releasable() || !l.clk.Now().Before(deadline) {
				break
			}
			if err := l.tr.WaitEvent(ctx, deadline); err != nil {
				return 0, err
			}
		}
		for r := 1; r < l.g.Executor.Size(); r++ {
			q, err := l.g.Executor.Isend([]byte{1}, r, tagTick)
			if err != nil {
				return 0, fmt.Errorf("executor: tick: %w", err)
			}
			l.outbox = append(l.outbox, q)
		}
		return clock.Since(l.clk, start), nil
	}
	if l.tickReq == nil {
		q, err := l.g.Executor.Irecv(l.tickBuf, 0, tagTick)
		if err != nil {
			return 0, fmt.Errorf("executor: tick receive: %w", err)
		}
		l.tickReq = q
	}
	signalled := l.heldSeen
	// The leader ticks as soon as its own idle wait ends (at most an idle
	// tick, or an event): waiting longer than the group's bound means it is
	// stalled or gone, and this rank says so instead of waiting forever.
	bound := start.Add(l.peerBound)
	for {
		l.tr.Pump()
		if held := l.tr.TerminalHeld(); held > signalled {
			// One of my transfers ended: ask the leader to iterate.
			signalled = held
			q, err := l.g.Executor.Isend([]byte{1}, 0, tagWake)
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
// the peer bound (what: what was awaited).
func (l *loop) peerTimeout(peer int, what string, since time.Time) error {
	te := &comm.TimeoutError{Group: l.g.Executor.Name(), Self: l.g.Executor.Rank(),
		Waiting: comm.Entry{Rank: l.g.Executor.Rank(), Kind: comm.KindRecv, Site: "executor: " + what},
		Cause:   fmt.Errorf("%s rank %d waited %v (the collective timeout)", l.g.Role, l.g.Rank, clock.Since(l.clk, since).Round(time.Millisecond))}
	if peer != comm.AnySource {
		te.Missing = []int{peer}
	}
	return te
}

// releasable reports whether the router could release a request now.
func (l *loop) releasable() bool {
	rt := l.router
	if rt == nil || rt.next >= len(rt.reqs) {
		return false
	}
	if rt.arrival.Kind == Closed {
		return rt.next-rt.done < rt.arrival.Concurrency
	}
	if rt.arrival.Kind == Burst {
		return true
	}
	return !l.t0.Add(rt.reqs[rt.next].At).After(l.clk.Now())
}

// stallCheck ends the run with ErrStalled when work waits and nothing has
// progressed for StallTimeout.
func (l *loop) stallCheck() error {
	if len(l.waiting) == 0 || clock.Since(l.clk, l.progress) < l.cfg.StallTimeout {
		return nil
	}
	st := l.pool.Stats()
	return fmt.Errorf("%w: %s rank %d: %d requests waiting, none admitted for %v; KV pool %d/%d blocks used, %d pinned, %d transfers over but never reaped",
		ErrStalled, l.g.Role, l.g.Rank, len(l.waiting), l.cfg.StallTimeout.Round(time.Millisecond), st.Used, st.Total, st.Pinned, l.tr.TerminalHeld())
}

// agreedNone reports, collectively over the executor group, whether no
// rank holds transfer sessions.
func (l *loop) agreedNone(ctx context.Context) (bool, error) {
	n := int64(l.tr.Sessions())
	if !l.isCtx() {
		n += int64(len(l.gen))
	}
	if l.g.Executor.Size() > 1 {
		l.fitBuf[0] = n
		if err := l.g.Executor.AllreduceInt64(ctx, comm.Max, l.fitBuf[:], l.fitBuf[:]); err != nil {
			return false, fmt.Errorf("executor: termination: %w", err)
		}
		n = l.fitBuf[0]
	}
	if n != 0 {
		return false, nil
	}
	return true, l.drainWakes(ctx)
}

// drainWakes receives every wake a member sent, so that no send is left
// unmatched when the group ends. Collective: the group sums what was sent.
func (l *loop) drainWakes(ctx context.Context) error {
	if l.g.Executor.Size() == 1 {
		return nil
	}
	l.fitBuf[0] = l.wakesSent
	if err := l.g.Executor.AllreduceInt64(ctx, comm.Sum, l.fitBuf[:], l.fitBuf[:]); err != nil {
		return fmt.Errorf("executor: termination: %w", err)
	}
	if !l.leader {
		return nil
	}
	for l.wakesRecv < l.fitBuf[0] {
		if l.wakeReq == nil {
			q, err := l.g.Executor.Irecv(l.wakeBuf, comm.AnySource, tagWake)
			if err != nil {
				return err
			}
			l.wakeReq = q
		}
		if _, err := l.waitPeer(ctx, l.wakeReq, comm.AnySource, fmt.Sprintf("%d member wakes", l.fitBuf[0]-l.wakesRecv)); err != nil {
			return fmt.Errorf("executor: draining member wakes: %w", err)
		}
		l.wakeReq = nil
		l.wakesRecv++
	}
	return nil
}

// runCtx is the CTX loop.
func (l *loop) runCtx(ctx context.Context) error {
	sync := l.cfg.Mode == transceiver.Sync
	group := l.g.Executor.Size()
	for {
		if err := l.sleep(ctx, l.faults.delay); err != nil {
			return err
		}
		iterStart := l.now()
		routerDone, err := l.intake(ctx)
		if err != nil {
			return err
		}
		admitted, err := l.admit(ctx)
		if err != nil {
			return err
		}
		busy := len(admitted) > 0
		if busy {
			if err := l.prefill(ctx, admitted); err != nil {
				return err
			}
		}
		// Transfer progress.
		switch {
		case !sync:
			atLeast := 0
			if !busy && l.cfg.Replays.On(UnclampedPoll) {
				atLeast = 1 // the seed's idle call, with the clamp gone
			}
			if _, err := l.ctxCheck(ctx, atLeast, !busy); err != nil {
				return err
			}
		case busy:
			// Sync mode reaps only through the idle policy and at points
			// the group agreed on (DESIGN.md §6), like the executor the
			// seeds describe: a busy iteration does not poll.
		default:
			a := DecideIdle(IdleInput{Sync: true, GroupRanks: group, SendInFlight: l.tr.Sessions() > 0})
			switch {
			case l.cfg.Replays.On(NoIdleReap) && group == 1:
				// seed 001: return without reaping.
			case a.Check:
				if _, err := l.ctxCheck(ctx, a.AtLeast, true); err != nil {
					return err
				}
			case len(l.waiting) > 0 && !l.cfg.Replays.On(NoIdleReap):
				// Admission is blocked by an agreed "nothing fits"
				// (admit agreed on it): a coordinated reap, entered by
				// every rank of the group together.
				if _, err := l.ctxCheck(ctx, 0, false); err != nil {
					return err
				}
			}
		}
		l.rep.Iterations++
		if err := l.stallCheck(); err != nil {
			return err
		}
		// Done? Everything of this group taken in, waiting empty, and no
		// rank holds a transfer: decided collectively.
		if l.seen == l.expected && len(l.waiting) == 0 && routerDone {
			none, err := l.agreedNone(ctx)
			if err != nil {
				return err
			}
			if none {
				return nil
			}
			if sync {
				// Coordinated drain: every rank agreed there is work.
				if _, err := l.ctxCheck(ctx, 0, false); err != nil {
					return err
				}
			}
		}
		if err := l.endIteration(ctx, iterStart, busy, len(admitted)); err != nil {
			return err
		}
	}
}

func (l *loop) samplePool() {
	st := l.pool.Stats()
	l.rep.PeakUsed = max(l.rep.PeakUsed, st.PeakUsed)
	l.rep.PeakPinned = max(l.rep.PeakPinned, st.PeakPinned)
}

// prefill runs the compute model for an admitted batch, fills the KV of the
// requests this rank holds, starts their sends and hands them to GEN.
func (l *loop) prefill(ctx context.Context, batch []rec) error {
	start := l.now()
	var tokens int64
	for _, r := range batch {
		tokens += r.Tokens
	}
	if err := l.sleep(ctx, time.Duration(tokens)*l.cfg.PrefillPerToken); err != nil {
		return err
	}
	for i := range batch {
		r := &batch[i]
		r.PrefillStart = start
		if !l.mine(*r) {
			continue
		}
		id := request.ID(r.ID)
		transceiver.Prefill(l.pool, l.shard, id)
		err := l.tr.StartSend(transceiver.Request{ID: id, Tokens: int(r.Tokens), CtxDP: int(r.CtxDP), GenDP: int(r.GenDP)})
		if err != nil {
			return fmt.Errorf("executor: ctx rank %d: %w", l.g.Rank, err)
		}
	}
	end := l.now()
	l.traceSpan("compute", fmt.Sprintf("prefill %d requests", len(batch)), start, end, map[string]any{"tokens": tokens})
	if !l.leader {
		return nil
	}
	for _, r := range batch {
		r.Kind = msgHandoff
		r.PrefillEnd = end
		if err := l.send(l.genLeaderWorld(int(r.GenDP)), r); err != nil {
			return err
		}
	}
	return nil
}

// runGen is the GEN loop.
func (l *loop) runGen(ctx context.Context) error {
	sync := l.cfg.Mode == transceiver.Sync
	group := l.g.Executor.Size()
	for {
		if err := l.sleep(ctx, l.faults.delay); err != nil {
			return err
		}
		iterStart := l.now()
		if _, err := l.intake(ctx); err != nil {
			return err
		}
		admitted, err := l.admit(ctx)
		if err != nil {
			return err
		}
		for _, r := range admitted {
			g := &genReq{r: r, admitted: l.clk.Now()}
			l.gen[r.ID] = g
			l.order = append(l.order, r.ID)
			l.recs[r.ID] = &RequestRecord{ID: r.ID, Tokens: int(r.Tokens), Output: int(r.Output), CtxDP: int(r.CtxDP), GenDP: int(r.GenDP),
				Arrival: r.Arrival, PrefillStart: r.PrefillStart, PrefillEnd: r.PrefillEnd, IdleArrival: r.IdleArrival == 1, GenAdmit: l.now()}
			if !l.mine(r) {
				continue
			}
			id := request.ID(r.ID)
			if err := l.tr.StartReceive(transceiver.Request{ID: id, Tokens: int(r.Tokens), CtxDP: int(r.CtxDP), GenDP: int(r.GenDP)}); err != nil {
				return fmt.Errorf("executor: gen rank %d: %w", l.g.Rank, err)
			}
		}
		if sync {
			// Rank-local, blocking: each admitted request of this rank.
			for _, r := range admitted {
				if !l.mine(r) {
					continue
				}
				start := l.now()
				if err := l.tr.ReceiveSync(ctx, request.ID(r.ID)); err != nil {
					return fmt.Errorf("executor: gen rank %d sync receive of request %d: %w", l.g.Rank, r.ID, err)
				}
				l.traceSpan("transfer", fmt.Sprintf("sync receive req %d", r.ID), start, l.now(), nil)
			}
		}
		if l.cfg.Replays.On(LocalErrorCollective) && group > 1 {
			// The old path: a rank-local transfer error is reported
			// through a collective only the failing rank enters.
			// Keyed on the failure event: the group may already have
			// agreed on the request by the time this rank looks.
			// The old path used the group its peers were about to enter
			// the consensus on: its collective meets theirs there.
			group := l.g.Executor
			if len(l.g.Scope) > 0 {
				group = l.g.Scope[0]
			}
			l.tr.Pump()
			for n := l.tr.Stats().LocalFailures; l.reportedFailures < n; l.reportedFailures++ {
				l.fitBuf[0] = int64(l.reportedFailures)
				if err := group.AllreduceInt64(ctx, comm.Max, l.fitBuf[:], l.fitBuf[:]); err != nil {
					return fmt.Errorf("executor: error report: %w", err)
				}
			}
		}
		// Transfer progress. Async: every iteration on every rank. Sync:
		// whenever this rank's scope holds sessions (identical on every
		// rank of the scope: sessions start and end by agreement).
		busyBefore := len(admitted) > 0 || l.decoding() > 0
		if !sync || l.tr.Sessions() > 0 {
			start := l.now()
			res, err := l.tr.CheckGenTransferStatus(ctx, 0)
			if err != nil {
				return err
			}
			l.noteCheck(res, !busyBefore, start, "gen status check")
			// What the scope agreed is reported to the executor group
			// (shareOutcomes); nothing acts on it before the group knows.
			for _, x := range res.Reaped {
				l.outcomes = append(l.outcomes, int64(x.ID), int64(x.State))
				if rr := l.recs[uint64(x.ID)]; rr != nil {
					rr.Bytes += x.Bytes
					if x.Reason != "" {
						rr.Reason = x.Reason
					}
				}
			}
		} else if l.cfg.Replays.On(UnsafeIdleReap) && group > 1 && !l.busyLocally(admitted) {
			// The guard removed: a rank with no work of its own polls
			// status, and the check's consensus spans its executor
			// group, while a peer may sit in a rank-local sync receive.
			// Idleness is rank-local here, as in the old path: under
			// attention-DP the agreed batch may hold only a peer's
			// requests.
			start := l.now()
			res, err := l.tr.CheckStatusOver(ctx, 0, []comm.Comm{l.g.Executor})
			if err != nil {
				return err
			}
			l.noteCheck(res, true, start, "gen idle status check (unsafe)")
		}
		// Under attention-DP the executor group spans DP indices that hold
		// different requests: ranks learn the other indices' agreed
		// transfer outcomes from one allgather over the group, entered
		// every iteration by every rank (the condition is configuration).
		if err := l.shareOutcomes(ctx); err != nil {
			return err
		}
		// Decode one step for every request whose KV arrived.
		busy, err := l.decode(ctx)
		if err != nil {
			return err
		}
		busy = busy || len(admitted) > 0
		l.rep.Iterations++
		if err := l.stallCheck(); err != nil {
			return err
		}
		if l.seen == l.expected && len(l.waiting) == 0 {
			none, err := l.agreedNone(ctx)
			if err != nil {
				return err
			}
			if none {
				return nil
			}
		}
		if err := l.endIteration(ctx, iterStart, busy, len(admitted)); err != nil {
			return err
		}
	}
}

// endIteration records the iteration's host step time, waits when the
// group is idle (busy is agreed, so every rank of the group waits, or none),
// and carries the idle bookkeeping into the next iteration.
func (l *loop) endIteration(ctx context.Context, iterStart int64, busy bool, admitted int) error {
	step := l.now() - iterStart
	if err := l.auditAgreed(ctx, "busy", busy); err != nil {
		return err
	}
	if busy {
		l.rep.BusyStepNs = append(l.rep.BusyStepNs, step)
		l.traceSpan("iteration", "busy", iterStart, iterStart+step, map[string]any{"admitted": admitted})
	} else {
		l.rep.IdleIterations++
		l.rep.IdleStepNs = append(l.rep.IdleStepNs, step)
		w, err := l.idleWait(ctx)
		if err != nil {
			return err
		}
		l.traceSpan("idle", "idle wait", iterStart+step, iterStart+step+w.Nanoseconds(), nil)
	}
	if !busy && (!l.wasIdle || len(l.waiting) > 0) {
		// Busy (or blocked on admission) until this iteration's start.
		l.idleSince = iterStart
	}
	l.wasIdle = !busy && len(l.waiting) == 0
	// Transfers already over when this iteration ended were either reaped
	// or left for a point the group agrees on: an idle rank wakes only for
	// transfers that end from now on.
	l.heldSeen = l.tr.TerminalHeld()
	if err := l.pruneOutbox(); err != nil {
		return err
	}
	l.samplePool()
	return nil
}

// auditAgreed checks, in checked mode, that a decision which chooses the
// next collective (busy: decode or wait) is the same on every rank of the
// executor group: one allreduce of (v, -v) by min gives the minimum and the
// maximum at once. A divergence is reported at the iteration it happens, as
// a desync naming the ranks on each side, before it can pair mismatched
// collectives. The condition (checked mode, group size) is configuration,
// so every rank of the group enters the audit or none does.
func (l *loop) auditAgreed(ctx context.Context, what string, v bool) error {
	if !l.audit || l.g.Executor.Size() < 2 {
		return nil
	}
	x := int64(0)
	if v {
		x = 1
	}
	l.auditBuf = [2]int64{x, -x}
	if err := l.g.Executor.AllreduceInt64(ctx, comm.Min, l.auditBuf[:], l.auditBuf[:]); err != nil {
		return fmt.Errorf("executor: agreement audit of %s: %w", what, err)
	}
	if l.auditBuf[0] == -l.auditBuf[1] {
		return nil
	}
	// Every rank saw the same min and max, so every rank gathers.
	var who comm.Gathered
	if err := l.g.Executor.AllgatherInt64s(ctx, []int64{x}, &who); err != nil {
		return fmt.Errorf("executor: agreement audit of %s: %w", what, err)
	}
	var yes, no []int
	for r := range l.g.Executor.Size() {
		if who.Of(r)[0] == 1 {
			yes = append(yes, r)
		} else {
			no = append(no, r)
		}
	}
	return fmt.Errorf("%w: executor group %q iteration %d: %s diverged: group ranks %v %s, group ranks %v not (a rank-local fact would choose the next collective)",
		comm.ErrDesync, l.g.Executor.Name(), l.rep.Iterations, what, yes, what, no)
}

// busyLocally reports whether this rank has work of its own: a request it
// holds admitted now, or one of its requests decoding (the unsafe-idle-reap
// replay's rank-local notion of idle).
func (l *loop) busyLocally(admitted []rec) bool {
	for _, r := range admitted {
		if l.mine(r) {
			return true
		}
	}
	for _, id := range l.order {
		if g := l.gen[id]; g.received && l.mine(g.r) {
			return true
		}
	}
	return false
}

// shareOutcomes makes the executor group agree on how transfers ended.
// Each rank reports what its consensus scope agreed this iteration. Where
// the scope is the whole executor group (no attention-DP), that is already
// the group's verdict. Under attention-DP the group spans DP indices, and
// the TP siblings of one DP index sit in different scopes that agree on the
// same request separately, possibly in different iterations: every rank's
// reports travel in one allgather over the executor group, entered every
// iteration by every rank (the condition is configuration), and a request
// is decided only once every rank that holds it has reported (outcomeTally).
// So received and failed, and with them busy and idle, are derived from the
// allgather's result alone, which is identical on every rank.
func (l *loop) shareOutcomes(ctx context.Context) error {
	flat := l.outcomes
	if l.layout.AttentionDP && l.layout.DP > 1 && l.g.Executor.Size() > 1 {
		if err := l.g.Executor.AllgatherInt64s(ctx, l.outcomes, &l.outcomeBuf); err != nil {
			return fmt.Errorf("executor: sharing transfer outcomes: %w", err)
		}
		flat = l.outcomeBuf.Flat
	}
	for i := 0; i+1 < len(flat); i += 2 {
		id := uint64(flat[i])
		st, decided := l.tally.add(id, transceiver.State(flat[i+1]))
		if !decided {
			continue
		}
		g := l.gen[id]
		if g == nil {
			continue
		}
		rr := l.recs[id]
		rr.TransferDone = l.now()
		if st == transceiver.StateTransferred {
			g.received = true
			continue
		}
		g.failed = rr.Reason
		if g.failed == "" || !l.mine(g.r) {
			g.failed = fmt.Sprintf("%s on gen DP index %d", st, g.r.GenDP)
		}
		g.state = st.String()
	}
	l.outcomes = l.outcomes[:0]
	return nil
}

func (l *loop) decoding() int {
	n := 0
	for _, id := range l.order {
		if l.gen[id].received {
			n++
		}
	}
	return n
}

// decode runs one decode step for the received requests, finishes those
// that are done or failed, and reports whether it did any work.
func (l *loop) decode(ctx context.Context) (bool, error) {
	var active int
	for _, id := range l.order {
		if g := l.gen[id]; g.received && g.failed == "" {
			active++
		}
	}
	if active > 0 {
		start := l.now()
		if err := l.sleep(ctx, l.cfg.DecodePerStep); err != nil {
			return false, err
		}
		l.traceSpan("compute", fmt.Sprintf("decode %d requests", active), start, l.now(), nil)
		l.progress = l.clk.Now() // a decode step is progress, even before a request finishes
	}
	now := l.now()
	keep := l.order[:0]
	var finished []uint64
	for _, id := range l.order {
		g := l.gen[id]
		rr := l.recs[id]
		switch {
		case g.failed != "":
			rr.State, rr.Reason, rr.Done = g.state, g.failed, now
			finished = append(finished, id)
		case g.received:
			g.generated++
			if g.generated == 1 {
				rr.FirstToken = now
			}
			if g.generated >= int(g.r.Output) {
				rr.State, rr.Done = "completed", now
				finished = append(finished, id)
				if l.mine(g.r) && l.shard.BlocksFor(int(g.r.Tokens)) > 0 {
					if err := l.pool.Release(request.ID(id)); err != nil {
						return false, fmt.Errorf("executor: gen rank %d release request %d: %w", l.g.Rank, id, err)
					}
				}
			} else {
				keep = append(keep, id)
			}
		default:
			keep = append(keep, id)
		}
	}
	l.order = keep
	for _, id := range finished {
		rr := l.recs[id]
		delete(l.gen, id)
		l.progress = l.clk.Now()
		if !l.leader {
			continue
		}
		l.rep.Requests = append(l.rep.Requests, *rr)
		state := int64(0)
		switch rr.State {
		case "failed":
			state = 1
		case "cancelled":
			state = 2
		}
		// msgDone carries the finish time in Arrival: the closed-loop
		// client's next request arrives then.
		if err := l.send(0, rec{Kind: msgDone, ID: id, Tokens: int64(rr.Tokens), Output: int64(rr.Output), Arrival: now, State: state}); err != nil {
			return false, err
		}
	}
	return active > 0 || len(finished) > 0, nil
}
