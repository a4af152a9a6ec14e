package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/transceiver"
)

// ctxLoop is a CTX (prefill) rank's executor: intake, agreed admission,
// prefill and the start of each request's sends, transfer progress by the
// policy, termination by agreement.
type ctxLoop struct {
	*loop
}

// run iterates until the group agrees every request is done.
func (c *ctxLoop) run(ctx context.Context) error {
	sync := c.cfg.Mode == transceiver.Sync
	for {
		if err := c.sleep(ctx, c.faults.delay); err != nil {
			return err
		}
		iterStart := c.now()
		routerDone, err := c.intake(ctx)
		if err != nil {
			return err
		}
		adm, err := c.admit(ctx)
		if err != nil {
			return err
		}
		busy := len(adm.recs) > 0
		if busy {
			if err := c.prefill(ctx, adm.recs); err != nil {
				return err
			}
		}
		in := ProgressInput{Role: c.g.role, Sync: sync, GroupRanks: c.g.exec.Size(), Busy: busy,
			AdmissionBlocked: adm.blocked, SendsHeld: c.tr.Sessions() > 0, Sessions: c.tr.Sessions(), Replays: c.cfg.Replays}
		if err := c.progress(ctx, in); err != nil {
			return err
		}
		c.rep.Iterations++
		if err := c.stallCheck(); err != nil {
			return err
		}
		// Done? Everything of this group taken in, nothing waiting, and
		// no rank holds a transfer: decided collectively (every value in
		// the condition is agreed).
		if c.seen == c.expected && len(c.waiting) == 0 && routerDone {
			none, err := c.agreedNone(ctx, c.tr.Sessions())
			if err != nil || none {
				return err
			}
			in.Draining, in.SendsHeld, in.Sessions = true, c.tr.Sessions() > 0, c.tr.Sessions()
			if err := c.progress(ctx, in); err != nil {
				return err
			}
		}
		if err := c.endIteration(ctx, iterStart, busy, len(adm.recs)); err != nil {
			return err
		}
	}
}

// progress runs the status check the policy decides for in.
func (c *ctxLoop) progress(ctx context.Context, in ProgressInput) error {
	a := DecideProgress(in)
	c.guardProgress(in, a)
	if !a.Check {
		return nil
	}
	_, err := c.check(ctx, a)
	return err
}

// prefill runs the compute model for an admitted batch, fills the KV of the
// requests this rank holds (their blocks were allocated on admission),
// starts their sends and hands them to GEN.
func (c *ctxLoop) prefill(ctx context.Context, batch []rec) error {
	start := c.now()
	var tokens int64
	for _, r := range batch {
		tokens += r.Tokens
	}
	c.rep.LargestBatch = max(c.rep.LargestBatch, len(batch))
	var d time.Duration
	d, c.seqBuf = c.cfg.prefillTime(batch, c.seqBuf)
	if c.g.ep != nil {
		c.dispBuf = c.dispBuf[:0]
		for _, r := range batch {
			for p := range int(r.Tokens) {
				c.dispBuf = append(c.dispBuf, DispatchToken{ID: r.ID, Pos: p, DP: int(r.CtxDP)})
			}
		}
		if err := c.dispatch(ctx); err != nil {
			return err
		}
	}
	if err := c.compute(ctx, d); err != nil {
		return err
	}
	for i := range batch {
		r := &batch[i]
		r.PrefillStart = start
		if !c.mine(*r) {
			continue
		}
		transceiver.Prefill(c.pool, c.shard, r.ID)
		if err := c.tr.StartSend(transceiver.Request{ID: r.ID, Tokens: int(r.Tokens), CtxDP: int(r.CtxDP), GenDP: int(r.GenDP)}); err != nil {
			return fmt.Errorf("executor: %s: %w", c.g.who(), err)
		}
	}
	end := c.now()
	c.traceSpan("compute", fmt.Sprintf("prefill %d requests", len(batch)), start, end, map[string]any{"tokens": tokens})
	if !c.leader {
		return nil
	}
	for _, r := range batch {
		r.Kind = msgHandoff
		r.PrefillEnd = end
		if err := c.send(c.genLeaderWorld(int(r.GenDP)), r); err != nil {
			return err
		}
	}
	return nil
}
