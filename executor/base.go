package executor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// groups are one rank's communicators, built by RunRank: its instance (every
// rank of its side), its executor group (the ranks that run one loop
// together: intake is broadcast and admission agreed over it) and its
// consensus scope (transceiver.Scopes).
type groups struct {
	role  topology.Role
	rank  int // within the instance
	inst  comm.Comm
	exec  comm.Comm
	scope []comm.Comm
	ep    *dispatcher // the EP group under attention-DP with ep (nil: none)
	// world is the world rank of each instance rank (nil: the backend does
	// not say), and name who() this rank is, both looked up once (the EP
	// dispatch names its rank every step).
	world []int
	name  string
}

// named looks up the instance's world ranks and this rank's name, once
// its instance is split.
func (g *groups) named() {
	if g.inst != nil {
		g.world = comm.PropsOf(g.inst).WorldRanks
	}
	g.name = g.whoIs(g.rank)
}

// whoIs names instance rank r as who names this rank.
func (g *groups) whoIs(r int) string {
	if g.world == nil && g.inst != nil {
		g.world = comm.PropsOf(g.inst).WorldRanks
	}
	if g.world != nil {
		return fmt.Sprintf("%s rank %d (world rank %d)", g.role, r, g.world[r])
	}
	return fmt.Sprintf("%s rank %d", g.role, r)
}

// who names this rank in errors as a reader needs it: its role and rank in
// the instance, and its world rank (the process to look at), e.g. "gen
// rank 1 (world rank 3)".
func (g *groups) who() string {
	if g.name == "" {
		g.named()
	}
	return g.name
}

func (g *groups) close() {
	g.ep.close()
	transceiver.CloseAll(g.scope)
	if g.exec != nil {
		g.exec.Close()
	}
	if g.inst != nil {
		g.inst.Close()
	}
}

// loop is the part of a rank's executor both roles share: the configuration
// and communicators, the transceiver and pool, intake and admission state,
// the control channel, idle-wait bookkeeping and metrics. ctxLoop and
// genLoop add what only their role needs. A loop is owned by one goroutine.
type loop struct {
	cfg    *Config
	world  comm.Comm
	ctl    comm.Comm // executor messages (a split of the world)
	g      groups
	tr     *transceiver.Transceiver
	pool   *kvpool.Pool
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
	expected int   // requests this executor group handles
	seen     int   // requests taken in so far
	waiting  []rec // taken in, not admitted (identical on every rank of the group)
	// unfinished are CTX's admitted prompts whose chunked prefill has
	// chunks left, in admission order (identical on every rank of the
	// group); plan is the step's chunkPlan over them and the waiting list.
	unfinished []unfinished
	plan       stepPlan
	chunkBuf   []chunk // a step's chunks, reused
	batchBuf   []byte
	seqBuf     []Seq               // the compute model's batch, reused
	tokensBuf  []int64             // the waiting prompts' tokens (schedule), reused
	dpBuf      []int               // their DP indices (schedule, decode), reused
	stepBuf    []bool              // which ready requests a decode step takes (DecodeCap), reused
	dispBuf    []dispatchSpan      // a step's tokens for the EP dispatch counts, reused
	stalled    map[request.ID]bool // injected stalls already served
	progressAt time.Time           // last admission, reap or completion (stall detection)
	checksAt   int                 // status checks this rank had entered at progressAt

	ctlChan
	idleState
	router *router

	// pending reports role-specific work still held (GEN: admitted
	// requests not finished); nil: none beyond sessions.
	pending func() bool
	// liveRecords (GEN) lists the records of the requests admitted and
	// not finished, for a failure dump; nil: none.
	liveRecords func() []RequestRecord
	audit       bool // checked mode: audit decisions that choose the next collective
	auditBuf    [2]int64
	admitBuf    [1]int64 // the admission allreduce
	noneBuf     [1]int64 // the termination allreduce
	reportBuf   [1]int64 // the local-error-collective replay's collective
	reported    int      // local failures already reported by that replay
	rep         RankReport
	rec         *flight.Recorder // guard values (checked mode; nil otherwise)
	log1        decisions        // the last decisions, for the failure dump
}

func (l *loop) isCtx() bool { return l.g.role == topology.Context }

// now is the time since the run's start, in nanoseconds, on the loop's clock.
func (l *loop) now() int64 { return clock.Since(l.clk, l.t0).Nanoseconds() }

// sleep waits d on the loop's clock (modelled compute, injected stalls and
// delays: the wait is the work itself, not a wait for progress).
func (l *loop) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return l.waiter.Wait(ctx, nil, l.clk.Now().Add(d))
}

// compute waits out d of modelled compute (a prefill or a decode step).
// In async mode this rank's transfers move beside it, as a serving
// engine's transfer agent moves KV while the forward pass runs: every
// completion event is pumped. Pumping is rank-local (it enters no
// collective); outcomes still wait for the next status check. In sync
// mode transfers do not overlap compute (that is the mode), so it sleeps.
func (l *loop) compute(ctx context.Context, d time.Duration) error {
	if l.cfg.Mode != transceiver.Async {
		return l.sleep(ctx, d)
	}
	if d <= 0 {
		return nil
	}
	deadline := l.clk.Now().Add(d)
	for {
		l.tr.Pump()
		if !l.clk.Now().Before(deadline) {
			return nil
		}
		if err := l.tr.WaitEvent(ctx, deadline); err != nil {
			return err
		}
	}
}

// dispatch exchanges the step's EP dispatch counts (dispatch.go) for the
// tokens in l.dispBuf, when the layout dispatches.
func (l *loop) dispatch(ctx context.Context) error {
	if l.g.ep == nil {
		return nil
	}
	return l.g.ep.exchange(ctx, l.dispBuf, l.g.who(), l.g.whoIs)
}

// mine reports whether this rank holds the KV of a request.
func (l *loop) mine(r rec) bool {
	if l.isCtx() {
		return int(r.CtxDP) == l.myDP
	}
	return int(r.GenDP) == l.myDP
}

// blocksFor is how many blocks of this rank's pool request r needs (0 when
// another DP index holds it, or under CP when it is short).
func (l *loop) blocksFor(r rec) int {
	if !l.mine(r) {
		return 0
	}
	return l.shard.BlocksFor(int(r.Tokens))
}

// releaseBlocks frees request id's blocks on this rank: the executor owns
// every block (it allocates on admission), the transceiver only leases
// them while bytes move.
func (l *loop) releaseBlocks(id request.ID) error {
	if len(l.pool.Blocks(id)) == 0 {
		return nil
	}
	if err := l.pool.Release(id); err != nil {
		return fmt.Errorf("executor: %s release %s: %w", l.g.who(), id, err)
	}
	return nil
}

// check runs this rank's status check as the progress policy decided and
// records what it reaped. The transfers it reaps are over on every rank of
// the scope; their leases have ended, and CTX frees the blocks here.
func (l *loop) check(ctx context.Context, a ProgressAction) (transceiver.Result, error) {
	start := l.now()
	var res transceiver.Result
	var err error
	switch {
	case a.Scope == ExecutorScope:
		res, err = l.tr.CheckStatusOver(ctx, a.AtLeast, []comm.Comm{l.g.exec})
	case l.isCtx():
		res, err = l.tr.CheckContextTransferStatus(ctx, a.AtLeast)
	default:
		res, err = l.tr.CheckGenTransferStatus(ctx, a.AtLeast)
	}
	if err != nil {
		return res, err
	}
	l.rep.StatusChecks++
	l.heldSeen = l.tr.TerminalHeld()
	if a.Idle {
		l.rep.IdleCheckColl += res.Collectives
		l.rep.IdleReaped += len(res.Reaped)
	}
	for _, x := range res.Reaped {
		l.rep.ReapDelay.Add(x.Reaped.Sub(x.Terminal).Nanoseconds())
		if x.Status != request.Completed && !x.Relayed && x.Reason != "" {
			l.rep.noteCause(x.ID, x.Status, x.Reason)
		}
		l.progressed()
		if l.cfg.Trace { // the span's names and arguments only when traced
			l.traceAsync("transfer", fmt.Sprintf("req %d %s", x.ID, x.Status), fmt.Sprintf("rank%d-req%d", l.world.Rank(), x.ID),
				x.Started.Sub(l.t0).Nanoseconds(), x.Reaped.Sub(l.t0).Nanoseconds(), map[string]any{"bytes": x.Bytes, "reason": x.Reason})
		}
		if l.isCtx() {
			if err := l.releaseBlocks(x.ID); err != nil {
				return res, err
			}
		}
	}
	if l.cfg.Trace && (res.Collectives > 0 || res.PollWait > 100*time.Microsecond) {
		l.traceSpan("check", a.Row, start, l.now(), map[string]any{"collectives": res.Collectives, "reaped": len(res.Reaped), "idle": a.Idle})
	}
	return res, nil
}

// reportLocalFailures is the local-error-collective replay: the old path
// reported a rank-local transfer error through a collective only the
// failing rank entered, on the group its peers were about to enter the
// consensus on, so its collective meets theirs there.
func (l *loop) reportLocalFailures(ctx context.Context, n int) error {
	group := l.g.exec
	if len(l.g.scope) > 0 {
		group = l.g.scope[0]
	}
	for range n {
		l.reportBuf[0] = int64(l.reported)
		l.reported++
		if err := group.AllreduceInt64(ctx, comm.Max, l.reportBuf[:], l.reportBuf[:]); err != nil {
			return fmt.Errorf("executor: error report: %w", err)
		}
	}
	return nil
}

// newLocalFailures is how many transfers failed on this rank since the
// local-error-collective replay last looked.
func (l *loop) newLocalFailures() int {
	l.tr.Pump()
	return l.tr.Stats().LocalFailures - l.reported
}

func (l *loop) traceSpan(cat, name string, from, to int64, args map[string]any) {
	if !l.cfg.Trace {
		return
	}
	l.traceEvent(TraceEvent{Name: name, Cat: cat, Ph: "X", TS: float64(from) / 1e3, Dur: float64(to-from) / 1e3,
		PID: 0, TID: l.world.Rank(), Args: args})
}

// traceAsync records a span that may overlap the rank's others (a
// transfer runs across iterations) as an async begin/end pair.
func (l *loop) traceAsync(cat, name, id string, from, to int64, args map[string]any) {
	if !l.cfg.Trace {
		return
	}
	tid := l.world.Rank()
	l.traceEvent(TraceEvent{Name: name, Cat: cat, Ph: "b", TS: float64(from) / 1e3, ID: id, TID: tid, Args: args})
	l.traceEvent(TraceEvent{Name: name, Cat: cat, Ph: "e", TS: float64(to) / 1e3, ID: id, TID: tid})
}

// traceEvent hands ev to the sink, or keeps it in the rank's report.
func (l *loop) traceEvent(ev TraceEvent) {
	if l.cfg.Sink != nil {
		l.cfg.Sink.Event(ev)
		return
	}
	l.rep.Trace = append(l.rep.Trace, ev)
}

// progressed records progress (an admission, a reap, a completion, a
// decode step) for stall detection.
func (l *loop) progressed() {
	l.progressAt = l.clk.Now()
	l.checksAt = l.tr.Stats().StatusChecks
}

// stallCheck ends the run with ErrStalled when decideStall says so.
func (l *loop) stallCheck() error {
	if len(l.waiting) == 0 && l.tr.Sessions() == 0 {
		return nil
	}
	in := stallInput{Waiting: len(l.waiting), Quiet: clock.Since(l.clk, l.progressAt), StallTimeout: l.cfg.StallTimeout,
		Held: l.tr.Sessions(), Over: l.tr.TerminalHeld(), Checked: l.tr.Stats().StatusChecks > l.checksAt,
		TransferTimeout: l.cfg.TransferTimeout}
	if in.Quiet < in.StallTimeout {
		return nil // the common case: no clock read below
	}
	if in.Over > 0 {
		in.OverFor = clock.Since(l.clk, l.tr.OldestTerminal())
	}
	if since := l.tr.OverdueSince(); !since.IsZero() {
		in.OverdueFor = clock.Since(l.clk, since)
	}
	if !decideStall(in) {
		return nil
	}
	st := l.pool.Stats()
	if in.OverdueFor >= in.StallTimeout {
		return fmt.Errorf("%w: %s: a transfer held %v past its deadline with no cancel begun: its deadline was never checked%s",
			ErrStalled, l.g.who(), in.OverdueFor.Round(time.Millisecond), l.lastDecisionText("progress"))
	}
	return fmt.Errorf("%w: %s: %d requests waiting, none admitted for %v; KV pool %d/%d blocks used, %d pinned, %d transfers over but never reaped%s",
		ErrStalled, l.g.who(), len(l.waiting), in.Quiet.Round(time.Millisecond), st.Used, st.Total, st.Pinned, in.Over, l.lastDecisionText("progress"))
}

// stallInput is what a rank knows when it asks whether it is stalled.
type stallInput struct {
	Waiting      int           // requests waiting for room
	Quiet        time.Duration // since the last admission, reap, completion or decode step
	StallTimeout time.Duration
	Held, Over   int  // transfer sessions held; of them, over on this rank but not reaped
	Checked      bool // a status check ran since the last progress (it offered the sessions over to the group)
	// OverFor is how long the oldest session over has been over.
	OverFor         time.Duration
	TransferTimeout time.Duration
	// OverdueFor is how long a live transfer has been past its deadline
	// with no cancel begun (Transceiver.OverdueSince; 0: none).
	OverdueFor time.Duration
}

// decideStall is the stall verdict, a pure function of the rank's state,
// not of the host's speed: work waits, nothing progressed for the stall
// timeout, and nothing this rank holds can still make room.
//   - A transfer still in flight here is waited for, however slowly it
//     moves: it has bounds of its own (the transfer deadline, an accepted
//     cancel, the peer liveness probe).
//   - A transfer over here that status checks keep offering to the group
//     is waited for while a peer may still hold it in flight: up to the
//     transfer deadline past its end (the peer's own bound), not longer:
//     offered but never applied after that is a stall too.
//   - What is left is a stall: seed 001's shape (transfers over, never
//     offered to a check that would reap them), blocks held with no
//     transfer at all, and outcomes that are never applied.
//   - Whatever waits: a transfer past its deadline by the stall timeout
//     with no cancel begun is a stall, since its own bound never fired
//     (TensorRT-LLM #17124's wedged transfer; the deadlines-when-busy
//     replay). A pump past a deadline begins the cancel, so a healthy
//     run never holds one that long.
func decideStall(in stallInput) bool {
	switch {
	case in.OverdueFor >= in.StallTimeout && in.StallTimeout > 0:
		return true
	case in.Waiting == 0 || in.Quiet < in.StallTimeout:
		return false
	case in.Held > in.Over:
		return false
	case in.Over > 0 && in.Checked && in.OverFor < in.TransferTimeout+in.StallTimeout:
		return false
	}
	return true
}

// agreedNone reports, collectively over the executor group, whether no
// rank holds transfer sessions or unfinished requests (held: this rank's).
// When none does, it drains the member wakes before the group ends.
func (l *loop) agreedNone(ctx context.Context, held int) (bool, error) {
	n := int64(held)
	if l.g.exec.Size() > 1 {
		l.noneBuf[0] = n
		if err := l.g.exec.AllreduceInt64(ctx, comm.Max, l.noneBuf[:], l.noneBuf[:]); err != nil {
			return false, fmt.Errorf("executor: termination: %w", err)
		}
		n = l.noneBuf[0]
	}
	if n != 0 {
		return false, nil
	}
	return true, l.drainWakes(ctx)
}

func (l *loop) samplePool() {
	st := l.pool.Stats()
	l.rep.PeakUsed = max(l.rep.PeakUsed, st.PeakUsed)
	l.rep.PeakPinned = max(l.rep.PeakPinned, st.PeakPinned)
}

// endIteration records the iteration's host step time, waits when the
// group is idle (busy is agreed, so every rank of the group waits, or none;
// checked mode audits it), and carries the idle bookkeeping into the next
// iteration.
func (l *loop) endIteration(ctx context.Context, iterStart int64, busy bool, admitted int) error {
	step := l.now() - iterStart
	if l.cfg.Replays.On(DeadlinesWhenBusy) {
		l.tr.SetIdle(!busy) // until the next iteration that executes a batch
	}
	if err := l.auditAgreed(ctx, "busy", busy); err != nil {
		return err
	}
	if busy {
		l.rep.BusyStep.Add(step)
		if l.cfg.Trace {
			l.traceSpan("iteration", "busy", iterStart, iterStart+step, map[string]any{"admitted": admitted})
		}
	} else {
		l.rep.IdleIterations++
		l.rep.IdleStep.Add(step)
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
