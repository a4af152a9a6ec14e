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
		batch := c.step(adm.recs)
		busy := len(batch) > 0
		if busy {
			if err := c.prefill(ctx, batch); err != nil {
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
		// Done? Everything of this group taken in, nothing waiting or
		// half prefilled, and no rank holds a transfer: decided
		// collectively (every value in the condition is agreed).
		if c.seen == c.expected && len(c.waiting) == 0 && len(c.unfinished) == 0 && routerDone {
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
	res, err := c.check(ctx, a)
	if in.Draining && len(res.Reaped) > 0 {
		c.drained = true
	}
	return err
}

// chunk is one step's part of a request's prefill: n prompt tokens after
// the past ones earlier steps prefilled (all of the prompt without chunked
// prefill).
type chunk struct {
	r       rec
	past, n int64
}

// last reports whether the chunk ends its prompt.
func (k chunk) last() bool { return k.past+k.n >= k.r.Tokens }

// unfinished is an admitted prompt with chunks left: done tokens of it
// prefilled.
type unfinished struct {
	r    rec
	done int64
}

// chunkSpans is the tokens a step's chunks dispatch (the EP counts), each
// at its own position in its prompt: a chunk of n after past covers
// positions [past, past+n).
func chunkSpans(batch []chunk, buf []dispatchSpan) []dispatchSpan {
	buf = buf[:0]
	for _, k := range batch {
		buf = append(buf, dispatchSpan{ID: k.r.ID, Pos: int(k.past), N: int(k.n), DP: int(k.r.CtxDP)})
	}
	return buf
}

// step is this iteration's chunks: without chunked prefill every admitted
// request whole; with it the unfinished prompts' next chunks (l.plan's,
// none for one whose DP index's budget is spent), then the admitted
// requests' first ones.
func (c *ctxLoop) step(admitted []rec) []chunk {
	out := c.chunkBuf[:0]
	if !c.cfg.ChunkedPrefill {
		for _, r := range admitted {
			out = append(out, chunk{r: r, n: r.Tokens})
		}
		c.chunkBuf = out
		return out
	}
	for i, u := range c.unfinished {
		if n := c.plan.Cont[i]; n > 0 {
			out = append(out, chunk{r: u.r, past: u.done, n: n})
		}
	}
	for i, r := range admitted {
		out = append(out, chunk{r: r, n: c.plan.New[i]})
	}
	c.chunkBuf = out
	return out
}

// prefill runs the compute model for a step's chunks, fills the KV of the
// requests whose prompt the step finishes and that this rank holds (their
// blocks were allocated on admission), starts their sends and hands them
// to GEN; the others stay unfinished, in order, for a later step.
func (c *ctxLoop) prefill(ctx context.Context, batch []chunk) error {
	start := c.now()
	var tokens int64
	for _, k := range batch {
		tokens += k.n
	}
	c.rep.LargestBatch = max(c.rep.LargestBatch, len(batch))
	var d time.Duration
	d, c.seqBuf = c.cfg.prefillTime(batch, c.seqBuf, c.g.exec.Size())
	if c.g.ep != nil {
		c.dispBuf = chunkSpans(batch, c.dispBuf)
		if err := c.dispatch(ctx); err != nil {
			return err
		}
	}
	if err := c.compute(ctx, d); err != nil {
		return err
	}
	// What the step finished, and the unfinished after it in admission
	// order: batch holds step's chunks, the unfinished prompts' first
	// (those l.plan gave a chunk), then the newly admitted.
	var finished []chunk
	var next []unfinished
	done := func(k chunk) {
		if k.past == 0 {
			k.r.PrefillStart = start
		}
		if k.last() {
			finished = append(finished, k)
			return
		}
		if c.leader {
			c.rep.PrefillChunks++ // once a group: the instance sums its groups
		}
		next = append(next, unfinished{r: k.r, done: k.past + k.n})
	}
	j := 0
	for i, u := range c.unfinished {
		if c.plan.Cont[i] == 0 {
			next = append(next, u) // its DP index's budget was spent
			continue
		}
		done(batch[j])
		j++
	}
	for _, k := range batch[j:] {
		done(k)
	}
	c.unfinished = next
	c.progressed() // a prefill step is progress, even one that finishes no prompt
	for _, k := range finished {
		if !c.mine(k.r) {
			continue
		}
		c.tr.Prefill(k.r.ID)
		if err := c.tr.StartSend(transceiver.Request{ID: k.r.ID, Tokens: int(k.r.Tokens), CtxDP: int(k.r.CtxDP), GenDP: int(k.r.GenDP)}); err != nil {
			return fmt.Errorf("executor: %s: %w", c.g.who(), err)
		}
	}
	end := c.now()
	if c.cfg.Trace {
		what := fmt.Sprintf("prefill %d requests", len(batch))
		if len(finished) < len(batch) {
			what += fmt.Sprintf(" (%d unfinished chunks)", len(batch)-len(finished))
		}
		c.traceSpan("compute", what, start, end, map[string]any{"tokens": tokens})
	}
	if !c.leader {
		return nil
	}
	for _, k := range finished {
		r := k.r
		r.Kind = msgHandoff
		r.PrefillEnd = end
		if err := c.send(c.genLeaderWorld(int(r.GenDP)), r); err != nil {
			return err
		}
	}
	return nil
}
