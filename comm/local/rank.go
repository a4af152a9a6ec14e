package local

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// rankComm is one rank's handle on a group.
type rankComm struct {
	w      *world
	g      *group
	rank   int
	splits int // Splits called on this communicator (equal on every member)
	closed atomic.Bool
	stamp  []int64 // checked mode's stamp for the next collective (checked mode's stamp comparer)
	// waiter times this rank's collectives on the group (collectives of
	// one communicator are made one at a time: their order is the contract).
	waiter clock.Waiter
}

// The optional capabilities comm looks for (comm/capability.go), by
// their methods: a method of this backend that drifts fails the build;
// one comm asks for by another signature fails comm's
// TestBackendCapabilities (local and sim; MPI's: TestMPICapabilities).
var (
	_ comm.Comm = (*rankComm)(nil)
	_ interface {
		InspectPeers(context.Context) []comm.PeerRecords
	} = (*rankComm)(nil)
	_ interface{ Abort(code int, reason error) }     = (*rankComm)(nil)
	_ interface{ Notify() <-chan struct{} }          = (*rankComm)(nil)
	_ interface{ CollectiveTimeout() time.Duration } = (*rankComm)(nil)
	_ interface{ WorldRanks() []int }                = (*rankComm)(nil)
	_ interface {
		Collective(context.Context, *typed.Op) error
	} = (*rankComm)(nil)
)

func newRankComm(w *world, g *group, rank int) *rankComm {
	return &rankComm{w: w, g: g, rank: rank, waiter: w.cfg.Clock.NewWaiter()}
}

// CollectiveTimeout is what comm.PropsOf(c).Timeout reads.
func (c *rankComm) CollectiveTimeout() time.Duration { return c.w.cfg.Timeout }

// Notify is what comm.PropsOf(c).Notify returns: one channel per world rank, shared by
// all of the rank's communicators.
func (c *rankComm) Notify() <-chan struct{} { return c.w.notify[c.WorldRank()] }

func (c *rankComm) Rank() int    { return c.rank }
func (c *rankComm) Size() int    { return len(c.g.members) }
func (c *rankComm) Name() string { return c.g.name }

// WorldRank returns the world rank of this rank.
func (c *rankComm) WorldRank() int { return c.g.members[c.rank] }

// WorldRanks is what comm.PropsOf(c).WorldRanks reads.
func (c *rankComm) WorldRanks() []int { return c.g.members }

func (c *rankComm) Close() error {
	c.closed.Store(true)
	return nil
}

func (c *rankComm) usable(op string) error {
	if c.closed.Load() {
		return fmt.Errorf("%w: %s on group %q rank %d", comm.ErrClosed, op, c.g.name, c.rank)
	}
	return nil
}

func (c *rankComm) Barrier(ctx context.Context) error {
	stamp := c.takeStamp() // whatever happens next: a stamp is for this call only
	if err := c.usable("Barrier"); err != nil {
		return err
	}
	return c.g.round(ctx, c.rank, c.waiter, stamp, flight.KindBarrier, func() { c.g.r.Kind[c.rank] = flight.KindBarrier })
}

func (c *rankComm) AllreduceInt64(ctx context.Context, op comm.ReduceOp, in, out []int64) error {
	stamp := c.takeStamp() // whatever happens next: a stamp is for this call only
	if err := c.usable("AllreduceInt64"); err != nil {
		return err
	}
	if !typed.Valid(op) {
		return fmt.Errorf("%w: AllreduceInt64: unknown op %v", comm.ErrBadArgument, op)
	}
	if len(in) != len(out) {
		return fmt.Errorf("%w: AllreduceInt64: len(in)=%d != len(out)=%d", comm.ErrBadArgument, len(in), len(out))
	}
	g := c.g
	r := c.rank
	err := g.round(ctx, r, c.waiter, stamp, flight.KindAllreduce, func() {
		g.r.Kind[r] = flight.KindAllreduce
		g.r.Op[r] = op
		g.r.In[r] = in
	})
	if err != nil {
		return err
	}
	if g.r.Agreed { // stamps that differ combined nothing: out stays as it was
		copy(out, g.r.Ints)
	}
	return nil
}

func (c *rankComm) AllgatherInt64s(ctx context.Context, in []int64, out *comm.Gathered) error {
	stamp := c.takeStamp() // whatever happens next: a stamp is for this call only
	if err := c.usable("AllgatherInt64s"); err != nil {
		return err
	}
	if out == nil {
		return fmt.Errorf("%w: AllgatherInt64s: nil output", comm.ErrBadArgument)
	}
	g := c.g
	r := c.rank
	err := g.round(ctx, r, c.waiter, stamp, flight.KindAllgather, func() {
		g.r.Kind[r] = flight.KindAllgather
		g.r.In[r] = in
	})
	if err != nil {
		return err
	}
	if g.r.Agreed {
		flat := out.Reset(g.r.Gather.Counts)
		copy(flat, g.r.Gather.Flat)
	}
	return nil
}

func (c *rankComm) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	stamp := c.takeStamp() // whatever happens next: a stamp is for this call only
	if err := c.usable("Bcast"); err != nil {
		return nil, err
	}
	if root < 0 || root >= c.Size() {
		return nil, fmt.Errorf("%w: Bcast: root %d outside 0..%d", comm.ErrBadArgument, root, c.Size()-1)
	}
	g := c.g
	r := c.rank
	err := g.round(ctx, r, c.waiter, stamp, flight.KindBcast, func() {
		g.r.Kind[r] = flight.KindBcast
		g.r.Root[r] = root
		g.r.Bytes[r] = data
	})
	if err != nil {
		return nil, err
	}
	if r == root {
		return data, nil
	}
	if !g.r.Agreed {
		return data[:0], nil
	}
	return append(data[:0], g.r.Out...), nil
}

func (c *rankComm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	c.takeStamp() // a Split round is never stamped (checked mode stamps a barrier before it)
	if err := c.usable("Split"); err != nil {
		return nil, err
	}
	if color < 0 {
		return nil, fmt.Errorf("%w: Split: color %d is negative", comm.ErrBadArgument, color)
	}
	g := c.g
	r := c.rank
	err := g.round(ctx, r, c.waiter, nil, flight.KindSplit, func() {
		g.r.Kind[r] = flight.KindSplit
		g.r.Color[r] = color
		g.r.Key[r] = key
	})
	if err != nil {
		return nil, err
	}
	// Every member reads the same grouping, computed once by the round.
	members, newRank := g.r.SplitResult(r)
	name := fmt.Sprintf("%s/s%dc%d", g.name, c.splits, color)
	c.splits++
	child, err := c.w.groupFor(name, members)
	if err != nil {
		return nil, err
	}
	return newRankComm(c.w, child, newRank), nil
}

// InspectPeers returns every group member's flight records (checked worlds
// only; unchecked worlds keep no records) and whether its rank function has
// returned.
func (c *rankComm) InspectPeers(ctx context.Context) []comm.PeerRecords {
	out := make([]comm.PeerRecords, len(c.g.members))
	for i, wr := range c.g.members {
		out[i].Rank = i
		out[i].Returned = c.w.returned[wr].Load()
		if c.w.recorders != nil {
			out[i].Records = c.w.recorders[wr].Snapshot()
			out[i].Pending = c.w.recorders[wr].Pending()
		}
	}
	return out
}

// Abort ends the whole in-process world: every rank's context is cancelled
// with reason.
func (c *rankComm) Abort(code int, reason error) {
	c.w.abort(fmt.Errorf("local: rank %d aborted the world (code %d): %w", c.g.members[c.rank], code, reason))
}

// SetStamp is checked mode's stamp comparer: the stamp rides this rank's next
// collective on c, and the round compares every rank's.
func (c *rankComm) SetStamp(s []int64) { c.stamp = s }

// StampsAgreed is checked mode's stamp comparer: whether every rank gave the same
// stamp to the last collective (the round's result stays valid until this
// rank's next collective).
func (c *rankComm) StampsAgreed() bool { return c.g.r.Agreed }

func (c *rankComm) takeStamp() []int64 {
	s := c.stamp
	c.stamp = nil
	return s
}

// Collective runs comm's typed collectives: one round, in which the last rank
// to arrive writes every rank's result into its receive buffer.
func (c *rankComm) Collective(ctx context.Context, op *typed.Op) error {
	stamp := c.takeStamp() // whatever happens next: a stamp is for this call only
	if err := c.usable(op.Kind.String()); err != nil {
		return err
	}
	if err := op.Check(c.rank, c.Size()); err != nil {
		return err
	}
	g := c.g
	r := c.rank
	return g.round(ctx, r, c.waiter, stamp, op.Kind, func() {
		g.r.Kind[r] = op.Kind
		g.r.Ops[r] = op
	})
}
