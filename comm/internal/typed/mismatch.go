// Counts that must pair up across ranks: a typed collective whose ranks
// agree on kind, datatype, reduction and root but whose buffers do not fit
// what the others send.

package typed

import (
	"fmt"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
)

// MismatchError is returned (wrapping ErrDesync) when the ranks of a group
// entered the same typed collective with counts that do not pair up: a
// Reduce of 2 elements against 3, a Gather whose rank sends more than the
// root expects from it, an all-to-all whose rank sends a peer what that
// peer does not expect. A backend's own check finds it (in-process and in
// simulation, where one round sees every rank's buffers); checked mode
// finds it before the backend's collective runs, on every backend, and
// names the collective's sequence number and call site (Seq, Site), which
// every rank shares: their stamps agreed.
type MismatchError struct {
	Group string
	Kind  flight.Kind
	// A and B are the two ranks (of Group) whose counts do not pair up:
	// the sender and the receiver, where one sends the other.
	A, B   int
	Detail string // what differs: "rank 2 sends rank 0 2 elements, which expects 1"
	// WorldRanks maps each rank of Group to its rank in the world, when
	// the backend knows it (nil otherwise).
	WorldRanks []int
	// Seq and Site are the collective's sequence number on Group and its
	// call site, set by checked mode ("" unchecked: no rank recorded one).
	Seq  uint64
	Site string
	// AnySite: the ranks' call sites were not compared (Config.AnySite),
	// so Site is this rank's own.
	AnySite bool
}

func (e *MismatchError) Error() string {
	who := kit.Who(e.WorldRanks, e.A) + " and " + kit.Who(e.WorldRanks, e.B)
	if e.Site == "" {
		return fmt.Sprintf("%v: group %q: %s: %s disagree: %s (unchecked mode cannot name call sites; run checked)",
			ErrDesync, e.Group, e.Kind, who, e.Detail)
	}
	where := "at " + e.Site + ", every rank there with the same stamp"
	if e.AnySite {
		where = "(this rank's call at " + e.Site + "; sites not compared)"
	}
	return fmt.Sprintf("%v: group %q: %s #%d %s: %s disagree: %s", ErrDesync, e.Group, e.Kind, e.Seq, where, who, e.Detail)
}

func (e *MismatchError) Unwrap() error { return ErrDesync }

// PairsPerRank says whether op's counts are each rank's own (a Gather's
// sends, a Scatter's receives, an all-to-all's both), so that only the
// ranks together can tell whether they pair up: the kinds Shape cannot
// stamp.
func (op *Op) PairsPerRank() bool {
	switch op.Kind {
	case flight.KindGather, flight.KindScatter, flight.KindAlltoall:
		return true
	}
	return false
}

// PairRows is what rank sends each rank and expects from each, in
// elements, -1 where it sends or expects nothing, for the kinds of
// PairsPerRank: over the group, what i sends j must be what j expects from
// i.
func (op *Op) PairRows(rank, size int) (sends, expects []int64) {
	sends, expects = make([]int64, size), make([]int64, size)
	for i := range size {
		sends[i], expects[i] = -1, -1
	}
	es := op.Type.Size()
	switch op.Kind {
	case flight.KindGather:
		sends[op.Root] = int64(len(op.Send) / es)
		if rank == op.Root {
			for i := range size {
				expects[i] = int64(op.RecvCounts[i])
			}
		}
	case flight.KindScatter:
		expects[op.Root] = int64(len(op.Recv) / es)
		if rank == op.Root {
			for j := range size {
				sends[j] = int64(op.SendCounts[j])
			}
		}
	case flight.KindAlltoall:
		for j := range size {
			sends[j], expects[j] = int64(op.SendCounts[j]), int64(op.RecvCounts[j])
		}
	}
	return sends, expects
}

// PairSums folds PairRows into two sums over (from, to, count): over the
// group, the sends' sums equal the expectations' when every count pairs
// up (and, but for a hash collision, only then). Two words a rank is what
// checked mode adds to its stamp for such a collective; it allocates
// nothing (the hot path's all-to-all takes it).
func (op *Op) PairSums(rank, size int) (sent, expected int64) {
	var s, e uint64
	es := op.Type.Size()
	switch op.Kind {
	case flight.KindGather:
		s = pairHash(rank, op.Root, int64(len(op.Send)/es))
		if rank == op.Root {
			for i := range size {
				e += pairHash(i, rank, int64(op.RecvCounts[i]))
			}
		}
	case flight.KindScatter:
		e = pairHash(op.Root, rank, int64(len(op.Recv)/es))
		if rank == op.Root {
			for j := range size {
				s += pairHash(rank, j, int64(op.SendCounts[j]))
			}
		}
	case flight.KindAlltoall:
		for j := range size {
			s += pairHash(rank, j, int64(op.SendCounts[j]))
			e += pairHash(j, rank, int64(op.RecvCounts[j]))
		}
	}
	return int64(s), int64(e)
}

// pairHash mixes one (from, to, count) triple (splitmix64's finalizer over
// the three).
func pairHash(from, to int, n int64) uint64 {
	z := uint64(from)*0x9e3779b97f4a7c15 ^ uint64(to)*0xc2b2ae3d27d4eb4f ^ uint64(n)*0x165667b19e3779f9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// FirstUnpaired is, over every rank's PairRows (rows[r] = sends then
// expects, size each), the first pair (i, j) in rank order whose send and
// expectation differ, as the MismatchError every rank builds alike (A the
// sender i, B the receiver j); ok is false when every count pairs up.
func FirstUnpaired(kind flight.Kind, rows [][]int64) (e *MismatchError, ok bool) {
	size := len(rows)
	for i := range size {
		for j := range size {
			s, x := rows[i][j], rows[j][size+i]
			if s == x {
				continue
			}
			e := &MismatchError{Kind: kind, A: i, B: j}
			switch kind {
			case flight.KindGather:
				e.Detail = fmt.Sprintf("rank %d sends the root %s, the root expects %s", i, elements(s), elements(x))
			case flight.KindScatter:
				e.Detail = fmt.Sprintf("the root sends rank %d %s, it expects %s", j, elements(s), elements(x))
			default:
				e.Detail = fmt.Sprintf("rank %d sends rank %d %s, which expects %s", i, j, elements(s), elements(x))
			}
			return e, true
		}
	}
	return nil, false
}

// elements renders a PairRows count: "2 elements", "1 element", "nothing".
func elements(n int64) string {
	switch {
	case n < 0:
		return "nothing"
	case n == 1:
		return "1 element"
	}
	return fmt.Sprintf("%d elements", n)
}
