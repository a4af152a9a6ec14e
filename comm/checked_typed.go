package comm

import (
	"context"
	"fmt"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// Collective implements collectives in checked mode: the typed collective
// is stamped (kind, datatype, reduction, root and counts every rank shares:
// typed.Op.Shape) and its stamp compared before the backend's collective runs, so
// a rank that reduces float32 while its peer reduces float64, or names
// another root, gets ErrDesync naming both call sites instead of a wrong
// or mismatched exchange.
func (c *checked) Collective(ctx context.Context, op *typed.Op) error {
	var path flight.Path
	path.Capture()
	raw := collectivesOf(c.raw)
	if raw == nil {
		return fmt.Errorf("%w: %s: the backend has no typed collectives", ErrBadArgument, op.Kind)
	}
	if err := op.Check(c.raw.Rank(), c.raw.Size()); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	shape := op.Shape()
	// Counts that are each rank's own (Shape cannot stamp them) ride the
	// stamp's exchange as two sums (typed.Op.PairSums); a backend that carries
	// the stamp in its own round checks them there (typed.MismatchError).
	var payload []int64
	pairs := op.PairsPerRank() && c.stamper == nil
	if pairs {
		s, e := op.PairSums(c.raw.Rank(), c.raw.Size())
		c.pairBuf = append(c.pairBuf[:0], s, e)
		payload = c.pairBuf
	}
	id, tctx, cancel, err := c.begin(ctx, op.Kind, shape, &path, payload)
	if err != nil {
		cancel()
		return err
	}
	if pairs {
		if err := c.pairUp(tctx, op, shape); err != nil {
			cancel()
			c.broken = err
			c.cfg.Recorder.End(id, err)
			return err
		}
	}
	err = raw.Collective(tctx, op)
	if c.stamper != nil {
		return c.stampedEnd(ctx, tctx, cancel, id, op.Kind, shape, err)
	}
	return c.end(ctx, tctx, cancel, id, op.Kind, shape, err)
}

// pairUp checks, after a stamp exchange whose stamps agreed, that op's
// per-rank counts pair up over the group: the sums every rank contributed
// (typed.Op.PairSums) balance. Where they do not, every rank gathers every
// rank's counts (every rank saw the same sums, so all of them do) and
// names the first pair that differs, with the collective's sequence number
// and call site.
func (c *checked) pairUp(ctx context.Context, op *typed.Op, shape int64) error {
	var sent, expected int64
	for r := range c.raw.Size() {
		p := c.payload(r)
		if len(p) != 2 {
			return fmt.Errorf("%w: group %q: %s: rank %d sent %d count sums, want 2", ErrDesync, c.raw.Name(), op.Kind, r, len(p))
		}
		sent += p[0]
		expected += p[1]
	}
	if sent == expected {
		return nil
	}
	n := c.raw.Size()
	sends, expects := op.PairRows(c.raw.Rank(), n)
	c.pairBuf = append(append(c.pairBuf[:0], sends...), expects...)
	if err := c.raw.AllgatherInt64s(ctx, c.pairBuf, &c.gather); err != nil {
		return fmt.Errorf("%w: group %q: %s #%d: counts do not pair up (gathering them: %v)", ErrDesync, c.raw.Name(), op.Kind, c.seq, err)
	}
	rows := make([][]int64, n)
	for r := range n {
		rows[r] = c.gather.Of(r)
		if len(rows[r]) != 2*n {
			return fmt.Errorf("%w: group %q: %s #%d: rank %d sent %d counts, want %d", ErrDesync, c.raw.Name(), op.Kind, c.seq, r, len(rows[r]), 2*n)
		}
	}
	e, ok := typed.FirstUnpaired(op.Kind, rows)
	if !ok { // cannot be: counts that all pair up sum alike
		return fmt.Errorf("%w: group %q: %s #%d: the count sums differ but every count pairs up", ErrDesync, c.raw.Name(), op.Kind, c.seq)
	}
	e.Group = c.raw.Name()
	return c.mismatch(*e, c.entry(op.Kind, shape))
}
