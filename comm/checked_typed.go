package comm

import (
	"context"
	"fmt"
)

// Collective implements Collectives in checked mode: the typed collective
// is stamped (kind, datatype, reduction, root and counts every rank shares:
// Op.Shape) and its stamp compared before the backend's collective runs, so
// a rank that reduces float32 while its peer reduces float64, or names
// another root, gets ErrDesync naming both call sites instead of a wrong
// or mismatched exchange.
func (c *checked) Collective(ctx context.Context, op *Op) error {
	var path Path
	path.capture()
	raw := CollectivesOf(c.raw)
	if raw == nil {
		return fmt.Errorf("%w: %s: the backend has no typed collectives", ErrBadArgument, op.Kind)
	}
	if err := op.Check(c.raw.Rank(), c.raw.Size()); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	shape := op.Shape()
	id, tctx, cancel, err := c.begin(ctx, op.Kind, shape, &path, nil)
	if err != nil {
		cancel()
		return err
	}
	err = raw.Collective(tctx, op)
	if c.stamper != nil {
		return c.stampedEnd(ctx, tctx, cancel, id, op.Kind, shape, err)
	}
	return c.end(ctx, tctx, cancel, id, op.Kind, shape, err)
}
