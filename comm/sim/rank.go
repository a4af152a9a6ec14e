package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/round"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// rankComm is one rank's handle on a group.
type rankComm struct {
	w      *world
	g      *group
	rank   int
	closed bool
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
	_ comm.Vectored = (*rankComm)(nil)
)

func (c *rankComm) Rank() int    { return c.rank }
func (c *rankComm) Size() int    { return len(c.g.members) }
func (c *rankComm) Name() string { return c.g.name }
func (c *rankComm) Close() error { c.closed = true; return nil }

// WorldRanks is what comm.PropsOf(c).WorldRanks reads.
func (c *rankComm) WorldRanks() []int { return c.g.members }

// Notify is what comm.PropsOf(c).Notify returns: one channel per world rank.
func (c *rankComm) Notify() <-chan struct{} { return c.w.notify[c.g.members[c.rank]] }

// CollectiveTimeout is what comm.PropsOf(c).Timeout reads (virtual time).
func (c *rankComm) CollectiveTimeout() time.Duration { return c.w.cfg.Timeout }

func (c *rankComm) usable(op string) error {
	if c.closed {
		return fmt.Errorf("%w: %s on group %q rank %d", comm.ErrClosed, op, c.g.name, c.rank)
	}
	return nil
}

func (c *rankComm) Barrier(ctx context.Context) error {
	if err := c.usable("Barrier"); err != nil {
		return err
	}
	return c.g.round(ctx, c.rank, flight.KindBarrier, 0, func() { c.g.r.Kind[c.rank] = flight.KindBarrier })
}

func (c *rankComm) AllreduceInt64(ctx context.Context, op comm.ReduceOp, in, out []int64) error {
	if err := c.usable("AllreduceInt64"); err != nil {
		return err
	}
	if !typed.Valid(op) {
		return fmt.Errorf("%w: AllreduceInt64: unknown op %v", comm.ErrBadArgument, op)
	}
	if len(in) != len(out) {
		return fmt.Errorf("%w: AllreduceInt64: len(in)=%d != len(out)=%d", comm.ErrBadArgument, len(in), len(out))
	}
	g, r := c.g, c.rank
	err := g.round(ctx, r, flight.KindAllreduce, 8*len(in), func() {
		g.r.Kind[r], g.r.Op[r], g.r.In[r] = flight.KindAllreduce, op, in
	})
	if err != nil {
		return err
	}
	copy(out, g.r.Ints)
	return nil
}

func (c *rankComm) AllgatherInt64s(ctx context.Context, in []int64, out *comm.Gathered) error {
	if err := c.usable("AllgatherInt64s"); err != nil {
		return err
	}
	if out == nil {
		return fmt.Errorf("%w: AllgatherInt64s: nil output", comm.ErrBadArgument)
	}
	g, r := c.g, c.rank
	// The payload a ring allgather moves is the total; the longest
	// contribution times the size is the bound every rank can compute.
	err := g.round(ctx, r, flight.KindAllgather, 8*len(in)*len(g.members), func() {
		g.r.Kind[r], g.r.In[r] = flight.KindAllgather, in
	})
	if err != nil {
		return err
	}
	if len(g.members) >= shareFrom && out.Shareable() {
		out.Share(g.gathered())
		return nil
	}
	flat := out.Reset(g.r.Gather.Counts)
	copy(flat, g.r.Gather.Flat)
	return nil
}

func (c *rankComm) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if err := c.usable("Bcast"); err != nil {
		return nil, err
	}
	if root < 0 || root >= c.Size() {
		return nil, fmt.Errorf("%w: Bcast: root %d outside 0..%d", comm.ErrBadArgument, root, c.Size()-1)
	}
	g, r := c.g, c.rank
	err := g.round(ctx, r, flight.KindBcast, len(data), func() {
		g.r.Kind[r], g.r.Root[r], g.r.Bytes[r] = flight.KindBcast, root, data
	})
	if err != nil {
		return nil, err
	}
	if r == root {
		return data, nil
	}
	return append(data[:0], g.r.Out...), nil
}

func (c *rankComm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if err := c.usable("Split"); err != nil {
		return nil, err
	}
	if color < 0 {
		return nil, fmt.Errorf("%w: Split: color %d is negative", comm.ErrBadArgument, color)
	}
	g, r := c.g, c.rank
	err := g.round(ctx, r, flight.KindSplit, 16*len(g.members), func() {
		g.r.Kind[r], g.r.Color[r], g.r.Key[r] = flight.KindSplit, color, key
	})
	if err != nil {
		return nil, err
	}
	members, newRank := g.r.SplitResult(r)
	name := fmt.Sprintf("%s/s%dc%d", g.name, g.splits[r], color)
	g.splits[r]++
	child, err := c.w.groupFor(name, members)
	if err != nil {
		return nil, err
	}
	// The raw child: a checked parent wraps it itself (comm.checked.Split);
	// wrapping it here too stamped every collective twice, and the outer
	// stamp (an Allgather) hid the user's call in a desync report.
	return &rankComm{w: c.w, g: child, rank: newRank}, nil
}

// InspectPeers returns every member's flight records (checked worlds only).
func (c *rankComm) InspectPeers(context.Context) []comm.PeerRecords {
	out := make([]comm.PeerRecords, len(c.g.members))
	for i, wr := range c.g.members {
		out[i].Rank = i
		if c.w.recorders != nil {
			out[i].Records = c.w.recorders[wr].Snapshot()
			out[i].Pending = c.w.recorders[wr].Pending()
		}
	}
	return out
}

// Abort ends the whole simulated world: every rank's context is cancelled.
func (c *rankComm) Abort(code int, reason error) {
	c.w.cancelWorld(fmt.Errorf("sim: rank %d aborted the world (code %d): %w", c.g.members[c.rank], code, reason))
}

// Clock is what comm.PropsOf(c).Clock reads: the rank's virtual clock.
func (c *rankComm) Clock() clock.Clock { return &rankClock{w: c.w, r: c.w.ranks[c.g.members[c.rank]]} }

// Collective runs comm's typed collectives: one round, its result written
// when the last rank arrives and read when the link model's time for the
// operation has passed.
func (c *rankComm) Collective(ctx context.Context, op *typed.Op) error {
	if err := c.usable(op.Kind.String()); err != nil {
		return err
	}
	if err := op.Check(c.rank, c.Size()); err != nil {
		return err
	}
	g, r := c.g, c.rank
	return g.round(ctx, r, op.Kind, round.TypedBytes(op), func() {
		g.r.Kind[r], g.r.Ops[r] = op.Kind, op
	})
}
