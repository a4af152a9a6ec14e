package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rankrun/rankrun/comm"
)

// ErrMalformedVote: a peer's contribution to a gather could not be decoded
// (wrong counts, unsorted or duplicate ids). Between ranks running the same
// code this means the allgather was paired with a different one: a desync
// that checked mode would have named.
var ErrMalformedVote = errors.New("consensus: malformed vote from a peer")

// Gatherer runs the collective step of a status check (Agree): it gathers
// every rank's view over the communicators of a scope, hop by hop, and
// folds the views so that after the last hop every rank of the combined
// group holds the same result, equal to Ready and Decide over all of their
// views.
//
// The zero value is ready to use. A Gatherer holds reusable buffers, so one
// Gatherer per rank and scope keeps a steady-state status check from
// allocating; it is not safe for concurrent use, except Collectives.
// Results alias its buffers and are valid until its next call.
//
// Both methods are collectives: every rank of every communicator in the
// scope must call them unconditionally, in the same order (see the package
// doc). A communicator of size 1 is skipped without a collective (its only
// member is this rank, so the skip is the same on every rank).
type Gatherer struct {
	send   []int64
	got    comm.Gathered
	acc    []int64 // the carried words after a hop's fold
	dec    []Decision
	nColls atomic.Uint64
}

// Collectives returns how many collectives this Gatherer has entered (one
// per hop of size > 1 per call), for metrics. Safe from any goroutine.
func (g *Gatherer) Collectives() uint64 { return g.nColls.Load() }

func (g *Gatherer) allgather(ctx context.Context, c comm.Comm) error {
	g.nColls.Add(1)
	return c.AllgatherInt64s(ctx, g.send, &g.got)
}

func wrapHop(step string, hop, hops int, c comm.Comm, err error) error {
	return fmt.Errorf("consensus: %s: hop %d of %d (group %q, rank %d of %d): %w",
		step, hop, hops, c.Name(), c.Rank(), c.Size(), err)
}
