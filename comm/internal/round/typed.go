package round

import (
	"fmt"
	"slices"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// combineTyped computes a round of typed collectives (typed.Op, one per
// rank, each already checked by its rank): the last rank to arrive writes
// every rank's output into that rank's receive buffer, in rank order, while
// the others wait. Ranks that disagree (kind, type, reduction, root, or
// counts that do not pair up) are a desync: nothing is written.
func (r *Round) combineTyped(group string, members []int) error {
	ops := r.Ops
	o := ops[0]
	desync := func(i int, format string, args ...any) error {
		return fmt.Errorf("%w: group %q: %s: %s and %s disagree: %s (unchecked mode cannot name call sites; run checked)",
			comm.ErrDesync, group, o.Kind, kit.Who(members, 0), kit.Who(members, i), fmt.Sprintf(format, args...))
	}
	// mismatch: ranks a and b (the sender and the receiver, where one
	// sends the other) entered the same collective with counts that do
	// not pair up; checked mode adds where (typed.MismatchError).
	mismatch := func(a, b int, format string, args ...any) error {
		return &typed.MismatchError{Group: group, Kind: o.Kind, A: a, B: b, Detail: fmt.Sprintf(format, args...), WorldRanks: members}
	}
	for i, p := range ops {
		switch {
		case p == nil:
			return desync(i, "one entered %s, the other a collective of another family", o.Kind)
		case p.Kind != o.Kind:
			return desync(i, "%s vs %s", o.Kind, p.Kind)
		case p.Type != o.Type:
			return desync(i, "datatype %s vs %s", o.Type, p.Type)
		case p.Reduce != o.Reduce:
			return desync(i, "reduction %s vs %s", o.Reduce, p.Reduce)
		case p.Root != o.Root:
			return desync(i, "root %d vs %d", o.Root, p.Root)
		}
	}
	es := o.Type.Size()
	n := len(ops)
	seg := func(b []byte, at, count int) []byte { return b[at*es : (at+count)*es] }
	// Pairing checks first: nothing is written unless every rank's
	// buffers fit what the others send.
	switch o.Kind {
	case flight.KindAllreduce, flight.KindReduce:
		for i, p := range ops {
			if len(p.Send) != len(o.Send) {
				return mismatch(0, i, "%d vs %d elements", len(o.Send)/es, len(p.Send)/es)
			}
		}
	case flight.KindBcast:
		root := ops[o.Root]
		for i, p := range ops {
			if i != o.Root && len(p.Recv) != len(root.Send) {
				return mismatch(o.Root, i, "the root sends %d elements, %s receives %d", len(root.Send)/es, kit.Who(members, i), len(p.Recv)/es)
			}
		}
	case flight.KindAllgather:
		for i, p := range ops {
			if !slices.Equal(p.RecvCounts, o.RecvCounts) {
				return mismatch(0, i, "receive counts %v vs %v", o.RecvCounts, p.RecvCounts)
			}
		}
	case flight.KindGather:
		root := ops[o.Root]
		for i, p := range ops {
			if len(p.Send)/es != root.RecvCounts[i] {
				return mismatch(i, o.Root, "%s sends %d elements, the root expects %d", kit.Who(members, i), len(p.Send)/es, root.RecvCounts[i])
			}
		}
	case flight.KindScatter:
		root := ops[o.Root]
		for i, p := range ops {
			if len(p.Recv)/es != root.SendCounts[i] {
				return mismatch(o.Root, i, "the root sends %s %d elements, it expects %d", kit.Who(members, i), root.SendCounts[i], len(p.Recv)/es)
			}
		}
	case flight.KindAlltoall:
		for i, p := range ops {
			for j, q := range ops {
				if p.SendCounts[j] != q.RecvCounts[i] {
					return mismatch(i, j, "%s sends %s %d elements, which expects %d", kit.Who(members, i), kit.Who(members, j), p.SendCounts[j], q.RecvCounts[i])
				}
			}
		}
	case flight.KindReduceScatter:
		for i, p := range ops {
			if !slices.Equal(p.RecvCounts, o.RecvCounts) {
				return mismatch(0, i, "counts %v vs %v", o.RecvCounts, p.RecvCounts)
			}
		}
	}
	// The results.
	switch o.Kind {
	case flight.KindAllreduce, flight.KindReduce, flight.KindReduceScatter:
		acc := slices.Clone(ops[0].Send)
		for _, p := range ops[1:] {
			typed.ReduceInto(o.Type, o.Reduce, acc, p.Send)
		}
		switch o.Kind {
		case flight.KindAllreduce:
			for _, p := range ops {
				copy(p.Recv, acc)
			}
		case flight.KindReduce:
			copy(ops[o.Root].Recv, acc)
		default:
			at := 0
			for _, p := range ops {
				k := len(p.Recv) / es
				copy(p.Recv, seg(acc, at, k))
				at += k
			}
		}
	case flight.KindBcast:
		src := ops[o.Root].Send
		for i, p := range ops {
			if i != o.Root {
				copy(p.Recv, src)
			}
		}
	case flight.KindAllgather:
		for _, p := range ops {
			for j, q := range ops {
				copy(seg(p.Recv, p.RecvDispls[j], p.RecvCounts[j]), q.Send)
			}
		}
	case flight.KindGather:
		root := ops[o.Root]
		for j, q := range ops {
			copy(seg(root.Recv, root.RecvDispls[j], root.RecvCounts[j]), q.Send)
		}
	case flight.KindScatter:
		root := ops[o.Root]
		for j, q := range ops {
			copy(q.Recv, seg(root.Send, root.SendDispls[j], root.SendCounts[j]))
		}
	case flight.KindAlltoall:
		for i, p := range ops {
			for j, q := range ops {
				copy(seg(q.Recv, q.RecvDispls[i], q.RecvCounts[i]), seg(p.Send, p.SendDispls[j], p.SendCounts[j]))
			}
		}
	}
	_ = n
	return nil
}

// TypedBytes is how many bytes a rank's typed collective puts on the links,
// for a link model: the larger of its send and receive buffers.
func TypedBytes(op *typed.Op) int { return max(len(op.Send), len(op.Recv)) }
