package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/transceiver"
)

// genLoop is a GEN (decode) rank's executor: intake, agreed admission, the
// start of each request's receive (and, in sync mode, a rank-local blocking
// receive), transfer progress by the policy, the group's agreement on how
// transfers ended, decode steps, termination by agreement. It keeps the
// record of every request its group admits.
type genLoop struct {
	*loop
	gen   map[request.ID]*genReq // admitted, receiving or decoding
	order []request.ID           // admission order
	recs  map[request.ID]*RequestRecord
	// relayed: the requests whose record's reason is a peer's news (the
	// report looks for the cause a rank found itself: RankReport.Causes).
	relayed map[request.ID]bool
	// outcomes: (id, status) pairs this rank's scope agreed this
	// iteration, reported to the executor group (shareOutcomes).
	outcomes   []int64
	outcomeBuf comm.Gathered
	tally      outcomeTally // reports of each request's holders, until all are in
	holders    int          // the ranks that hold each request (what the tally needs, replays aside)
	readyBuf   []*genReq    // the requests ready to decode, running first (decode), reused
	capBuf     []int        // decodeCap's counts, reused
	orderBuf   []*genReq    // decode's look-up of order, reused
}

// genReq is a request between its admission and its end on the group. Its
// status changes only through shareOutcomes and decode, from agreed values.
type genReq struct {
	r         rec
	received  bool           // the group agreed its transfer completed
	status    request.Status // Failed or Cancelled once the group agreed so
	reason    string
	reports   int // holder reports the group decided its transfer on
	generated int
	inStep    bool // in this decode step (DecodeCap)
}

func newGenLoop(l *loop, holders int) *genLoop {
	real := holders
	if l.cfg.Replays.On(AdpEarlyOutcome) {
		holders = 1 // decide on the first holder's report
	}
	g := &genLoop{loop: l, gen: map[request.ID]*genReq{}, recs: map[request.ID]*RequestRecord{}, tally: newOutcomeTally(holders), holders: real}
	l.pending = func() bool { return len(g.gen) > 0 }
	l.liveRecords = func() []RequestRecord {
		out := make([]RequestRecord, 0, len(g.order))
		for _, id := range g.order {
			if rr := g.recs[id]; rr != nil {
				out = append(out, *rr)
			}
		}
		return out
	}
	return g
}

// run iterates until the group agrees every request is done.
func (g *genLoop) run(ctx context.Context) error {
	sync := g.cfg.Mode == transceiver.Sync
	for {
		if err := g.sleep(ctx, g.faults.delay); err != nil {
			return err
		}
		iterStart := g.now()
		if _, err := g.intake(ctx); err != nil {
			return err
		}
		adm, err := g.admit(ctx)
		if err != nil {
			return err
		}
		recvStart := g.now()
		if err := g.startReceives(ctx, adm.recs, sync); err != nil {
			return err
		}
		// gctx: the collectives up to the first the whole executor group
		// enters (the check, then the outcomes' allgather under
		// attention-DP) wait out a peer's sync receive; the rest of the
		// iteration has the plain bound (afterSyncReceives).
		gctx := g.afterSyncReceives(ctx, adm.recs, sync, recvStart)
		in := ProgressInput{Role: g.g.role, Sync: sync, GroupRanks: g.g.exec.Size(), Busy: len(adm.recs) > 0 || g.decoding() > 0,
			ScopeHolds: g.tr.Sessions() > 0, AdmissionBlocked: adm.blocked, Replays: g.cfg.Replays}
		if g.cfg.Replays.On(LocalErrorCollective) {
			in.NewLocalFailures = g.newLocalFailures()
		}
		if g.cfg.Replays.On(UnsafeIdleReap) {
			in.BusyLocally = g.busyLocally(adm.recs)
		}
		if g.cfg.Replays.On(QueueSizedCollective) {
			in.QueueLen = g.tr.TerminalHeld()
		}
		if g.cfg.Replays.On(IdleMaxPoll) && !sync && g.g.exec.Size() > 1 {
			if in.SomeRankIdle, err = g.someRankIdle(gctx, !g.busyLocally(adm.recs)); err != nil {
				return err
			}
		}
		a := DecideProgress(in)
		g.guardProgress(in, a)
		if a.ReportFailures > 0 {
			if err := g.reportLocalFailures(gctx, a.ReportFailures); err != nil {
				return err
			}
		}
		if a.QueueShape > 0 && g.g.exec.Size() > 1 {
			g.rec.Guard("queue_len", int64(a.QueueShape))
			q := make([]int64, a.QueueShape)
			if err := g.g.exec.AllreduceInt64(gctx, comm.Max, q, q); err != nil {
				return fmt.Errorf("executor: %s transfer queue (replay queue-sized-collective): %w", g.g.who(), err)
			}
		}
		if a.Check {
			res, err := g.check(gctx, a)
			if err != nil {
				return err
			}
			g.noteReaped(res.Reaped, a.Scope)
		}
		if g.cfg.Replays.On(FillGateGather) && g.layout.AttentionDP && g.layout.DP > 1 && g.g.exec.Size() > 1 {
			if err := g.fillGateGather(gctx, !g.busyLocally(adm.recs)); err != nil {
				return err
			}
		}
		if err := g.shareOutcomes(gctx); err != nil {
			return err
		}
		// Decode one step for every request whose KV arrived.
		busy, err := g.decode(ctx)
		if err != nil {
			return err
		}
		busy = busy || len(adm.recs) > 0
		g.rep.Iterations++
		if err := g.stallCheck(); err != nil {
			return err
		}
		if g.seen == g.expected && len(g.waiting) == 0 {
			none, err := g.agreedNone(ctx, g.tr.Sessions()+len(g.gen)+g.tr.HeldAcks())
			if err != nil || none {
				return err
			}
		}
		if err := g.endIteration(ctx, iterStart, busy, len(adm.recs)); err != nil {
			return err
		}
	}
}

// afterSyncReceives is the context of the rest of a sync iteration that
// admitted work. Each rank of the group admitted the same requests (the
// admission is agreed) and has just left its rank-local blocking receives;
// a peer may still be inside its own, each bounded by the transfer
// deadline (counted from its session's start, this iteration). The next
// collectives, up to the first the whole executor group enters, wait that
// out: their bound gets the time left to the deadline as grace
// (comm.WithGrace), so a peer that is only slow, within its deadline, is
// never timed out by a rank that finished first (DESIGN.md §6: no rank
// waits in a collective on a peer inside rank-local work bounded by a
// longer deadline, with a shorter bound). A peer stuck past both is still
// named, at the deadline plus the collective bound; once the group has met
// no rank is in a receive, and later collectives have the plain bound.
func (g *genLoop) afterSyncReceives(ctx context.Context, admitted []rec, sync bool, start int64) context.Context {
	if !sync || len(admitted) == 0 {
		return ctx
	}
	left := g.cfg.TransferTimeout - time.Duration(g.now()-start)
	return comm.WithGrace(ctx, left)
}

// startReceives opens a record for every admitted request and a receive
// session for those this rank holds (their blocks were allocated on
// admission); in sync mode it then blocks in a rank-local receive for each.
func (g *genLoop) startReceives(ctx context.Context, admitted []rec, sync bool) error {
	for _, r := range admitted {
		g.gen[r.ID] = &genReq{r: r}
		g.order = append(g.order, r.ID)
		g.recs[r.ID] = &RequestRecord{ID: r.ID, Tokens: int(r.Tokens), Output: int(r.Output), CtxDP: int(r.CtxDP), GenDP: int(r.GenDP),
			Arrival: r.Arrival, PrefillStart: r.PrefillStart, PrefillEnd: r.PrefillEnd, IdleArrival: r.IdleArrival == 1, GenAdmit: g.now(),
			TransferDone: -1, FirstToken: -1}
		if !g.mine(r) {
			continue
		}
		if err := g.tr.StartReceive(transceiver.Request{ID: r.ID, Tokens: int(r.Tokens), CtxDP: int(r.CtxDP), GenDP: int(r.GenDP)}); err != nil {
			return fmt.Errorf("executor: %s: %w", g.g.who(), err)
		}
	}
	if !sync {
		return nil
	}
	// Rank-local and blocking: each admitted request of this rank.
	for _, r := range admitted {
		if !g.mine(r) {
			continue
		}
		start := g.now()
		if err := g.tr.ReceiveSync(ctx, r.ID); err != nil {
			return fmt.Errorf("executor: %s sync receive of request %d: %w", g.g.who(), r.ID, err)
		}
		if g.cfg.Trace {
			g.traceSpan("transfer", fmt.Sprintf("sync receive req %d", r.ID), start, g.now(), nil)
		}
	}
	return nil
}

// noteReaped records what this rank's check reaped. What its own scope
// agreed is reported to the executor group (shareOutcomes); nothing acts
// on it before the group knows. A check over the whole executor group (the
// unsafe-idle-reap replay) is not the scope's verdict and is not reported.
func (g *genLoop) noteReaped(reaped []transceiver.Reaped, scope CheckScope) {
	for _, x := range reaped {
		if scope == OwnScope {
			g.outcomes = append(g.outcomes, int64(x.ID), int64(x.Status))
		}
		if rr := g.recs[x.ID]; rr != nil {
			rr.Bytes += x.Bytes
			rr.Verified += x.Verified
			if x.Reason != "" {
				rr.Reason = x.Reason
				g.setRelayed(x.ID, x.Relayed)
			}
		}
	}
}

// setRelayed notes whether request id's reason is a peer's news.
func (g *genLoop) setRelayed(id request.ID, relayed bool) {
	switch {
	case relayed && g.relayed == nil:
		g.relayed = map[request.ID]bool{id: true}
	case relayed:
		g.relayed[id] = true
	default:
		delete(g.relayed, id)
	}
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
func (g *genLoop) shareOutcomes(ctx context.Context) error {
	flat := g.outcomes
	if g.layout.AttentionDP && g.layout.DP > 1 && g.g.exec.Size() > 1 {
		g.rec.Guard("outcome_reports", int64(len(g.outcomes)/2))
		if err := g.g.exec.AllgatherInt64s(ctx, g.outcomes, &g.outcomeBuf); err != nil {
			return fmt.Errorf("executor: sharing transfer outcomes: %w", err)
		}
		flat = g.outcomeBuf.Flat
	}
	for i := 0; i+1 < len(flat); i += 2 {
		id := request.ID(flat[i])
		st, decided := g.tally.add(id, request.Status(flat[i+1]))
		if !decided {
			continue
		}
		q := g.gen[id]
		if q == nil {
			continue
		}
		q.reports = g.tally.decidedAfter
		rr := g.recs[id]
		rr.TransferDone = g.now()
		if st == request.Completed {
			q.received = true
			continue
		}
		q.status, q.reason = st, rr.Reason
		relayed := g.relayed[id]
		if q.reason == "" || !g.mine(q.r) {
			q.reason, relayed = fmt.Sprintf("%s on gen DP index %d", st, q.r.GenDP), true
		}
		g.setRelayed(id, relayed)
	}
	g.outcomes = g.outcomes[:0]
	return nil
}

// busyLocally reports whether this rank has work of its own: a request it
// holds admitted now, or one of its requests decoding (the unsafe-idle-reap
// replay's rank-local notion of idle).
// fillGateGather is the fill-gate-gather replay's exchange (TensorRT-LLM
// #19435): each rank's fill state, 16 bytes, gathered over the executor
// group by a collective that a rank-local gate picks: pickled (bytes)
// when this rank needs a fill, raw int64 otherwise.
func (g *genLoop) fillGateGather(ctx context.Context, needFill bool) error {
	g.rec.Guard("needs_fill", b2i(needFill))
	n := g.g.exec.Size()
	state := [2]int64{b2i(needFill), int64(g.decoding())}
	var err error
	if needFill {
		var pickled [16]byte
		for i, v := range state {
			binary.LittleEndian.PutUint64(pickled[8*i:], uint64(v))
		}
		err = comm.Allgather(ctx, g.g.exec, pickled[:], make([]byte, 16*n))
	} else {
		err = comm.Allgather(ctx, g.g.exec, state[:], make([]int64, 2*n))
	}
	if err != nil {
		return fmt.Errorf("executor: %s fill state (replay fill-gate-gather): %w", g.g.who(), err)
	}
	return nil
}

// dispatchUnlessEmpty is the step's EP dispatch, which every rank of the
// group enters in every step the group decodes in, its own DP index's
// tokens zero or not (a dummy step). The zero-token-skip replay brings
// back vLLM #43547: a rank whose DP index has no token in the step
// returns early, one collective behind its peers.
func (g *genLoop) dispatchUnlessEmpty(ctx context.Context) error {
	if g.cfg.Replays.On(ZeroTokenSkip) {
		mine := int64(0)
		for _, t := range g.dispBuf {
			if t.DP == g.myDP {
				mine += int64(t.N)
			}
		}
		g.rec.Guard("step_tokens_here", mine)
		if mine == 0 {
			return nil
		}
	}
	return g.dispatch(ctx)
}

// someRankIdle is the idle-max-poll replay's collective: the MAX of each
// rank's own idle flag over the executor group (TensorRT-LLM #17299).
func (g *genLoop) someRankIdle(ctx context.Context, idle bool) (bool, error) {
	g.rec.Guard("idle_locally", b2i(idle))
	buf := [1]int64{b2i(idle)}
	if err := g.g.exec.AllreduceInt64(ctx, comm.Max, buf[:], buf[:]); err != nil {
		return false, fmt.Errorf("executor: %s idle flag (replay idle-max-poll): %w", g.g.who(), err)
	}
	return buf[0] != 0, nil
}

func (g *genLoop) busyLocally(admitted []rec) bool {
	for _, r := range admitted {
		if g.mine(r) {
			return true
		}
	}
	for _, id := range g.order {
		if q := g.gen[id]; q.received && g.mine(q.r) {
			return true
		}
	}
	return false
}

func (g *genLoop) decoding() int {
	n := 0
	for _, id := range g.order {
		if g.gen[id].received {
			n++
		}
	}
	return n
}

// decode runs one decode step for the received requests, finishes those
// that are done or failed (freeing their blocks here), and reports whether
// it did any work.
func (g *genLoop) decode(ctx context.Context) (bool, error) {
	// The requests ready to decode, and which of them this step takes
	// (DecodeCap: max_batch per DP index): those already decoding first,
	// so a request that started is never paused for one admitted before
	// it whose KV arrived later, then the rest in admission order. Every
	// input (order, receipts, tokens generated) is agreed.
	g.orderBuf = g.orderBuf[:0] // g.order's requests, looked up once
	for _, id := range g.order {
		g.orderBuf = append(g.orderBuf, g.gen[id])
	}
	g.readyBuf, g.dpBuf = g.readyBuf[:0], g.dpBuf[:0]
	for _, running := range []bool{true, false} {
		for _, q := range g.orderBuf {
			if q.received && q.status == request.Pending && (q.generated > 0) == running {
				g.readyBuf, g.dpBuf = append(g.readyBuf, q), append(g.dpBuf, int(q.r.GenDP))
			}
		}
	}
	g.stepBuf, g.capBuf = decodeCap(g.dpBuf, g.cfg.MaxBatch, g.stepBuf, g.capBuf)
	for i, q := range g.readyBuf {
		q.inStep = g.stepBuf[i]
	}
	ready := len(g.readyBuf)
	g.seqBuf = g.seqBuf[:0]
	for _, q := range g.orderBuf { // the batch in admission order, as before the cap
		if q.received && q.status == request.Pending && q.inStep {
			g.seqBuf = append(g.seqBuf, Seq{Tokens: int(q.r.Tokens) + q.generated, DP: int(q.r.GenDP)})
		}
	}
	active := len(g.seqBuf)
	g.rep.LargestBatch = max(g.rep.LargestBatch, active)
	if active < ready {
		g.rep.SchedulerHeld++
	}
	if active > 0 {
		start := g.now()
		if g.g.ep != nil {
			g.dispBuf = g.dispBuf[:0]
			for _, q := range g.orderBuf {
				if q.received && q.status == request.Pending && q.inStep {
					g.dispBuf = append(g.dispBuf, dispatchSpan{ID: q.r.ID, Pos: int(q.r.Tokens) + q.generated, N: 1, DP: int(q.r.GenDP)})
				}
			}
			if err := g.dispatchUnlessEmpty(ctx); err != nil {
				return false, err
			}
		}
		if err := g.compute(ctx, g.cfg.decodeTime(g.seqBuf, g.g.exec.Size())); err != nil {
			return false, err
		}
		if g.cfg.Trace {
			g.traceSpan("compute", fmt.Sprintf("decode %d requests", active), start, g.now(), nil)
		}
		g.progressed() // a decode step is progress, even before a request finishes
	}
	now := g.now()
	keep := g.order[:0]
	var finished []request.ID
	for i, id := range g.order {
		q, rr := g.orderBuf[i], g.recs[id]
		switch {
		case q.status != request.Pending:
			rr.State, rr.Reason, rr.Done = q.status, q.reason, now
			finished = append(finished, id)
		case q.received && !q.inStep: // ready, left for a later step (max_batch)
			keep = append(keep, id)
		case q.received:
			q.generated++
			if q.generated == 1 {
				rr.FirstToken = now
			}
			if q.generated >= int(q.r.Output) {
				rr.State, rr.Done = request.Completed, now
				finished = append(finished, id)
			} else {
				keep = append(keep, id)
			}
		default:
			keep = append(keep, id)
		}
	}
	g.order = keep
	for _, id := range finished {
		if err := g.releaseBlocks(id); err != nil {
			if q := g.gen[id]; errors.Is(err, kvpool.ErrPinned) && q.reports > 0 {
				err = fmt.Errorf("%w; the group decided its transfer after reports=%d of holders=%d (the ranks that hold it), and this rank's receive was still open", err, q.reports, g.holders)
			}
			return false, err
		}
		rr, relayed := g.recs[id], g.relayed[id]
		delete(g.gen, id)
		delete(g.recs, id)
		delete(g.relayed, id)
		g.progressed()
		g.rep.finished(*rr, relayed, g.leader, g.cfg.Records, g.cfg.Sink)
		if !g.leader {
			continue
		}
		// msgDone carries the finish time in Arrival: the closed-loop
		// client's next request arrives then.
		if err := g.send(0, rec{Kind: msgDone, ID: id, Tokens: int64(rr.Tokens), Output: int64(rr.Output), Arrival: now}); err != nil {
			return false, err
		}
	}
	return active > 0 || len(finished) > 0, nil
}
