package executor

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
)

// intake is collective over the executor group: the leader's batch is
// broadcast so every rank appends the same requests in the same order. It
// reports whether the router has released and seen finished every request
// (world rank 0 knows; the broadcast carries it).
func (l *loop) intake(ctx context.Context) (bool, error) {
	routerDone := l.router.allDone()
	if l.leader {
		if err := l.pumpCtl(); err != nil {
			return false, err
		}
		if err := l.router.release(l.now(), l.route); err != nil {
			return false, err
		}
		routerDone = l.router.allDone()
	}
	batch := l.inbox
	if l.g.exec.Size() > 1 {
		if l.leader {
			l.rec.Guard("inbox", int64(len(l.inbox)))
		}
		l.batchBuf = encodeBatch(l.batchBuf, routerDone, l.inbox)
		got, err := l.g.exec.Bcast(ctx, 0, l.batchBuf)
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
		if err := l.injectOnIntake(ctx, r.ID); err != nil {
			return false, err
		}
	}
	return routerDone, nil
}

// injectOnIntake applies the faults this rank has for a request it just
// took in: exit, or stall once.
func (l *loop) injectOnIntake(ctx context.Context, id request.ID) error {
	if l.faults.exit[id] {
		return fmt.Errorf("%w: %s exits on request %d", ErrInjected, l.g.who(), id)
	}
	if d, ok := l.faults.stall[id]; ok && !l.stalled[id] {
		l.stalled[id] = true
		l.log.Warn("injected stall", zap.Stringer("request", id), zap.Duration("for", d))
		return l.sleep(ctx, d)
	}
	return nil
}

// schedule is how many waiting requests the step scheduler lets this
// iteration admit (scheduleCap, or under chunked prefill chunkPlan, kept
// in l.plan for the step): on CTX, a batch's requests and prompt tokens
// per DP index; GEN admits whatever its pools fit (its transfers
// start on admission) and caps its decode steps instead (DecodeCap). It
// counts the iterations it held requests back.
func (l *loop) schedule() int {
	if l.g.role != topology.Context || l.cfg.MaxBatch <= 0 && l.cfg.MaxTokens <= 0 {
		return len(l.waiting)
	}
	dps, tokens := l.dpBuf[:0], l.tokensBuf[:0]
	for _, r := range l.waiting {
		dps, tokens = append(dps, int(r.CtxDP)), append(tokens, r.Tokens)
	}
	l.dpBuf, l.tokensBuf = dps, tokens
	var n int
	if l.cfg.ChunkedPrefill {
		contDPs, contLeft := make([]int, len(l.unfinished)), make([]int64, len(l.unfinished))
		for i, u := range l.unfinished {
			contDPs[i], contLeft[i] = int(u.r.CtxDP), u.r.Tokens-u.done
		}
		l.plan = chunkPlan(contDPs, contLeft, dps, tokens, l.cfg.MaxBatch, l.cfg.MaxTokens)
		n = len(l.plan.New)
	} else {
		n = scheduleCap(dps, tokens, l.cfg.MaxBatch, l.cfg.MaxTokens)
	}
	if n < len(l.waiting) {
		l.rep.SchedulerHeld++
	}
	return n
}

// admitted is what admission started this iteration.
type admitted struct {
	recs    []rec
	blocked bool // requests wait and the group agreed none fits
}

// admit runs the admission policy (DecideAdmission) over the waiting
// requests the step scheduler lets in (schedule), agrees on it with the
// group, and allocates the admitted requests' blocks on this rank (both
// roles: the executor owns every block).
func (l *loop) admit(ctx context.Context) (admitted, error) {
	limit := l.schedule()
	needs := make([]int, limit)
	for i, r := range l.waiting[:limit] {
		needs[i] = l.blocksFor(r)
	}
	free := l.pool.Stats().Free
	a := DecideAdmission(AdmissionInput{Role: l.g.role, GroupRanks: l.g.exec.Size(), Needs: needs, Free: free, Replays: l.cfg.Replays})
	l.guardAdmission(len(needs), a, free)
	fit := a.LocalFit
	switch {
	case a.ReapFirst:
		// The old gate (replay): "nothing fits here", so reap first, a
		// status check entered on rank-local state.
		_, err := l.check(ctx, ProgressAction{Check: true, Row: "replay local-admission-gate"})
		return admitted{}, err
	case a.Agree:
		l.admitBuf[0] = int64(fit)
		if err := l.g.exec.AllreduceInt64(ctx, comm.Min, l.admitBuf[:], l.admitBuf[:]); err != nil {
			return admitted{}, fmt.Errorf("executor: admission: %w", err)
		}
		fit = int(l.admitBuf[0])
	}
	// Blocked: requests wait, the step scheduler let some be tried (under
	// chunked prefill an unfinished prompt may take the whole budget: that
	// is no block), and the agreed answer is that none fits.
	out := admitted{recs: append([]rec(nil), l.waiting[:fit]...), blocked: len(l.waiting) > 0 && limit > 0 && fit == 0}
	if out.blocked {
		// The pools are full (of blocks a reap would free, or of live work).
		l.rep.AdmissionBlocked++
	}
	l.waiting = append(l.waiting[:0], l.waiting[fit:]...)
	for _, r := range out.recs {
		n := l.blocksFor(r)
		if n == 0 {
			continue // another DP index holds it, or a short request under CP
		}
		if _, err := l.pool.TryAllocate(r.ID, n); err != nil {
			return out, fmt.Errorf("executor: %s admitted request %d but cannot allocate: %w", l.g.who(), r.ID, err)
		}
	}
	if fit > 0 {
		l.progressed()
	}
	return out, nil
}
