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

// voteHeader is the number of int64 counts before the ids of an encoded
// Vote: [len(C), len(F), len(D), len(Q), C..., F..., D..., Q...].
const voteHeader = 4

// Gatherer runs the collective step of phases 2 and 3: it gathers every
// rank's view over the communicators of a scope, hop by hop, and folds the
// views so that after the last hop every rank of the combined group holds
// the same result, equal to Ready or Decide over all of their views.
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
	peer   [voteHeader][]uint64 // a decoded peer contribution
	cur    [voteHeader][]uint64 // this rank's carried view (raw)
	ready  folder
	votes  tally
	out    Outcome
	rout   []uint64
	tmp    []uint64
	nColls atomic.Uint64
}

// Collectives returns how many collectives this Gatherer has entered (one
// per hop of size > 1 per call), for metrics. Safe from any goroutine.
func (g *Gatherer) Collectives() uint64 { return g.nColls.Load() }

// ReadyIDs is phase 2: it returns the ids that every rank of the combined
// scope reports in mine, sorted ascending without duplicates. The scope
// lists the communicators in hop order (CTX: TP then PP; GEN: one); an
// empty scope means a single rank and returns mine normalized. mine is not
// modified. The result aliases g's buffers until g's next call.
//
// ReadyIDs is a collective: see Gatherer.
func (g *Gatherer) ReadyIDs(ctx context.Context, scope []comm.Comm, mine []uint64) ([]uint64, error) {
	g.cur[0] = normalize(g.cur[0], mine)
	for hop, c := range scope {
		if c == nil {
			return nil, fmt.Errorf("consensus: ready ids: hop %d of %d: nil communicator", hop, len(scope))
		}
		if c.Size() == 1 {
			continue
		}
		g.send = appendIDs(g.send[:0], g.cur[0])
		if err := g.allgather(ctx, c); err != nil {
			return nil, wrapHop("ready ids", hop, len(scope), c, err)
		}
		g.ready.reset()
		for r := range c.Size() {
			ids, err := decodeIDs(g.peer[0], g.got.Of(r))
			g.peer[0] = ids
			if err != nil {
				return nil, wrapHop("ready ids", hop, len(scope), c, fmt.Errorf("%w: rank %d: %v", ErrMalformedVote, r, err))
			}
			g.ready.intersect(ids)
		}
		g.cur[0] = append(g.cur[0][:0], g.ready.acc...)
	}
	g.rout = append(g.rout[:0], g.cur[0]...)
	return g.rout, nil
}

// Outcome is phase 3: it returns Decide over the votes of every rank of the
// combined scope. Between hops it carries the raw unions (cancelled,
// failed) and intersections (completed, quiesced) and applies precedence
// only after the last hop, so the hierarchical result equals the flat one.
// An empty scope means a single rank and returns Decide of mine alone. mine
// is not modified. The result aliases g's buffers until g's next call.
//
// Outcome is a collective: see Gatherer.
func (g *Gatherer) Outcome(ctx context.Context, scope []comm.Comm, mine Vote) (Outcome, error) {
	for i, l := range [voteHeader][]uint64{mine.Cancelled, mine.Failed, mine.Completed, mine.Quiesced} {
		g.cur[i] = normalize(g.cur[i], l)
	}
	for hop, c := range scope {
		if c == nil {
			return Outcome{}, fmt.Errorf("consensus: outcome: hop %d of %d: nil communicator", hop, len(scope))
		}
		if c.Size() == 1 {
			continue
		}
		g.send = g.send[:0]
		for i := range voteHeader {
			g.send = append(g.send, int64(len(g.cur[i])))
		}
		for i := range voteHeader {
			g.send = appendIDs(g.send, g.cur[i])
		}
		if err := g.allgather(ctx, c); err != nil {
			return Outcome{}, wrapHop("outcome", hop, len(scope), c, err)
		}
		g.votes.reset()
		for r := range c.Size() {
			if err := g.decodeVote(g.got.Of(r)); err != nil {
				return Outcome{}, wrapHop("outcome", hop, len(scope), c, fmt.Errorf("%w: rank %d: %v", ErrMalformedVote, r, err))
			}
			g.votes.addSorted(g.peer[0], g.peer[1], g.peer[2], g.peer[3])
		}
		g.cur[0] = append(g.cur[0][:0], g.votes.cancelled.acc...)
		g.cur[1] = append(g.cur[1][:0], g.votes.failed.acc...)
		g.cur[2] = append(g.cur[2][:0], g.votes.completed.acc...)
		g.cur[3] = append(g.cur[3][:0], g.votes.quiesced.acc...)
	}
	decideRaw(&g.out, &g.tmp, g.cur[0], g.cur[1], g.cur[2], g.cur[3])
	return g.out, nil
}

func (g *Gatherer) allgather(ctx context.Context, c comm.Comm) error {
	g.nColls.Add(1)
	return c.AllgatherInt64s(ctx, g.send, &g.got)
}

// decodeVote splits an encoded vote into g.peer, checking its shape.
func (g *Gatherer) decodeVote(v []int64) error {
	if len(v) < voteHeader {
		return fmt.Errorf("%d values, fewer than the %d counts", len(v), voteHeader)
	}
	total := int64(voteHeader)
	for i := range voteHeader {
		if v[i] < 0 || v[i] > int64(len(v)) {
			return fmt.Errorf("count %d is %d with %d values", i, v[i], len(v))
		}
		total += v[i]
	}
	if total != int64(len(v)) {
		return fmt.Errorf("counts %v need %d values, have %d", v[:voteHeader], total, len(v))
	}
	off := voteHeader
	for i := range voteHeader {
		n := int(v[i])
		ids, err := decodeIDs(g.peer[i], v[off:off+n])
		g.peer[i] = ids
		if err != nil {
			return fmt.Errorf("list %d: %v", i, err)
		}
		off += n
	}
	return nil
}

func wrapHop(step string, hop, hops int, c comm.Comm, err error) error {
	return fmt.Errorf("consensus: %s: hop %d of %d (group %q, rank %d of %d): %w",
		step, hop, hops, c.Name(), c.Rank(), c.Size(), err)
}

// appendIDs appends ids to dst as int64 bit patterns.
func appendIDs(dst []int64, ids []uint64) []int64 {
	for _, id := range ids {
		dst = append(dst, int64(id))
	}
	return dst
}

// decodeIDs converts v into dst, checking that the ids ascend strictly (a
// peer sends its normalized view).
func decodeIDs(dst []uint64, v []int64) ([]uint64, error) {
	dst = dst[:0]
	for _, x := range v {
		dst = append(dst, uint64(x))
	}
	if !strictlyAscending(dst) {
		return dst, errors.New("ids not strictly ascending")
	}
	return dst, nil
}
