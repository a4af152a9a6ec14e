package typed

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/rankrun/rankrun/comm/flight"
)

// Op describes one typed collective for a backend. Buffers are the
// elements' bytes (see the generic functions, which build them);
// counts and displacements are in elements, one per rank of the group.
//
//	Allreduce      Send, Recv (same length); Reduce
//	Reduce         Send; Recv on Root (same length); Reduce, Root
//	Bcast          Send on Root, Recv elsewhere (same length everywhere)
//	Allgatherv     Send; Recv, RecvCounts, RecvDispls
//	Gatherv        Send; on Root Recv, RecvCounts, RecvDispls; Root
//	Scatterv       on Root Send, SendCounts, SendDispls; Recv; Root
//	Alltoallv      Send, SendCounts, SendDispls, Recv, RecvCounts, RecvDispls
//	ReduceScatter  Send (the sum of RecvCounts); Recv (RecvCounts[rank]); RecvCounts; Reduce
type Op struct {
	Kind       flight.Kind
	Type       Datatype
	Reduce     ReduceOp
	Root       int
	Send, Recv []byte
	SendCounts []int
	SendDispls []int
	RecvCounts []int
	RecvDispls []int
}

// Check validates op for rank rank of a group of size ranks: the error,
// wrapping ErrBadArgument, names the argument and the rule. It checks what
// one rank can see; what ranks must agree on (kind, type, root, counts) is
// checked by the backends as a desync, and by checked mode by stamps.
func (op *Op) Check(rank, size int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadArgument, op.Kind, fmt.Sprintf(format, args...))
	}
	if !op.Type.Valid() {
		return bad("unknown datatype %d", uint8(op.Type))
	}
	es := op.Type.Size()
	for _, b := range []struct {
		name string
		b    []byte
	}{{"send", op.Send}, {"receive", op.Recv}} {
		if len(b.b)%es != 0 {
			return bad("%s buffer of %d bytes is not a whole number of %s elements", b.name, len(b.b), op.Type)
		}
	}
	ns, nr := len(op.Send)/es, len(op.Recv)/es
	rooted := op.Kind == flight.KindReduce || op.Kind == flight.KindBcast || op.Kind == flight.KindGather || op.Kind == flight.KindScatter
	if rooted && (op.Root < 0 || op.Root >= size) {
		return bad("root %d outside 0..%d", op.Root, size-1)
	}
	reduces := op.Kind == flight.KindAllreduce || op.Kind == flight.KindReduce || op.Kind == flight.KindReduceScatter
	if reduces && !op.Reduce.ValidFor(op.Type) {
		return bad("reduction %s does not apply to %s", op.Reduce, op.Type)
	}
	// Only Allreduce may reduce in place (MPI_IN_PLACE: the same slice);
	// for every other kind MPI calls overlapping buffers erroneous, and
	// each backend would give a different wrong answer.
	if op.Kind != flight.KindAllreduce && op.Kind != flight.KindBcast && overlap(op.Send, op.Recv) {
		return bad("the send and receive buffers overlap (only Allreduce may run in place, with the same slice)")
	}
	if op.Kind == flight.KindAllreduce && overlap(op.Send, op.Recv) && unsafe.SliceData(op.Send) != unsafe.SliceData(op.Recv) {
		return bad("the send and receive buffers overlap without being the same slice (in place means in == out)")
	}
	counts := func(name string, c, d []int, buf int) error {
		if len(c) != size || (d != nil && len(d) != size) {
			return bad("%s counts and displacements need one per rank (%d), have %d and %d", name, size, len(c), len(d))
		}
		for r, n := range c {
			at := 0
			if d != nil {
				at = d[r]
			}
			switch {
			case n < 0:
				return bad("%s count %d for rank %d: must not be negative", name, n, r)
			case at < 0:
				return bad("%s displacement %d for rank %d: must not be negative", name, at, r)
			case at+n > buf:
				return bad("%s count %d at displacement %d for rank %d does not fit the %d-element buffer", name, n, at, r, buf)
			}
		}
		return nil
	}
	switch op.Kind {
	case flight.KindAllreduce:
		if ns != nr {
			return bad("send has %d elements, receive %d: they must be equal", ns, nr)
		}
	case flight.KindReduce:
		if rank == op.Root && ns != nr {
			return bad("send has %d elements, the root's receive %d: they must be equal", ns, nr)
		}
	case flight.KindBcast:
		if rank == op.Root && op.Recv != nil && len(op.Recv) != len(op.Send) {
			return bad("the root's send has %d elements, its receive %d", ns, nr)
		}
	case flight.KindAllgather:
		if err := counts("receive", op.RecvCounts, op.RecvDispls, nr); err != nil {
			return err
		}
		if op.RecvCounts[rank] != ns {
			return bad("send has %d elements, receive count for this rank %d", ns, op.RecvCounts[rank])
		}
	case flight.KindGather:
		if rank == op.Root {
			if err := counts("receive", op.RecvCounts, op.RecvDispls, nr); err != nil {
				return err
			}
			if op.RecvCounts[rank] != ns {
				return bad("send has %d elements, the root's receive count for itself %d", ns, op.RecvCounts[rank])
			}
		}
	case flight.KindScatter:
		if rank == op.Root {
			if err := counts("send", op.SendCounts, op.SendDispls, ns); err != nil {
				return err
			}
			if op.SendCounts[rank] != nr {
				return bad("receive has %d elements, the root's send count for itself %d", nr, op.SendCounts[rank])
			}
		}
	case flight.KindAlltoall:
		if err := counts("send", op.SendCounts, op.SendDispls, ns); err != nil {
			return err
		}
		if err := counts("receive", op.RecvCounts, op.RecvDispls, nr); err != nil {
			return err
		}
		if op.SendCounts[rank] != op.RecvCounts[rank] {
			return bad("this rank sends itself %d elements but receives %d from itself", op.SendCounts[rank], op.RecvCounts[rank])
		}
	case flight.KindReduceScatter:
		if err := counts("receive", op.RecvCounts, nil, math.MaxInt); err != nil {
			return err
		}
		total := 0
		for _, n := range op.RecvCounts {
			total += n
		}
		if ns != total || nr != op.RecvCounts[rank] {
			return bad("send has %d elements and receive %d; want the sum of the counts (%d) and this rank's count (%d)",
				ns, nr, total, op.RecvCounts[rank])
		}
	default:
		return bad("not a typed collective")
	}
	return nil
}

// offset64 starts a counts digest (FNV-1a's offset basis); noCounts is the
// low bits of a shape that digested no count.
const (
	offset64 = 0xcbf29ce484222325
	noCounts = uint32(offset64&0xffffffff | 1<<31)
)

// Shape is what every rank of a group must agree on for op, folded into
// one value (checked mode stamps it): the datatype, the reduction, the
// root and, where every rank passes the same counts, their digest. Per-rank
// counts (a rank's send to each peer in an all-to-all) are the ranks' own.
//
// Bits 56-63 hold the datatype, 48-55 the reduction, 32-47 the root, 0-31
// the count (bit 31 clear: Allreduce, Reduce and Bcast, under 2^31 elements) or a
// digest of the counts (bit 31 set), so an error can say which differed.
func (op *Op) Shape() int64 {
	h := uint64(offset64)
	mix := func(v uint64) { h = (h ^ v) * 0x100000001b3 }
	count := -1
	switch op.Kind {
	case flight.KindAllreduce, flight.KindReduce:
		count = len(op.Send)
	case flight.KindBcast:
		count = len(op.Recv)
		if op.Recv == nil {
			count = len(op.Send)
		}
	case flight.KindAllgather, flight.KindReduceScatter:
		for _, n := range op.RecvCounts {
			mix(uint64(n))
		}
	}
	low := h&0xffffffff | 1<<31
	if count >= 0 && op.Type.Valid() {
		count /= op.Type.Size() // Send and Recv are the elements' bytes
	}
	if count >= 0 && count < 1<<31 {
		low = uint64(count)
	} else if count >= 0 {
		mix(uint64(count))
		low = h&0xffffffff | 1<<31
	}
	return int64(uint64(op.Type)<<56 | uint64(op.Reduce)<<48 | uint64(uint16(op.Root))<<32 | low)
}

// DescribeShape renders a collective's stamped argument shape as an error
// shows it: " (float32, sum, count 2)", " (int64, counts digest 0x...)",
// " (count 4, sum)" (AllreduceInt64's stamp: count<<8 | op), " (root 1)"
// (Bcast's: the root), "".
func DescribeShape(kind flight.Kind, shape int64) string {
	if s, ok := typedShape(kind, shape); ok {
		return s
	}
	switch kind {
	case flight.KindAllreduce:
		return fmt.Sprintf(" (count %d, %s)", shape>>8, ReduceOp(shape&0xff))
	case flight.KindBcast:
		return fmt.Sprintf(" (root %d)", shape)
	}
	return ""
}

// typedShape describes a typed collective's stamped shape for an error:
// " (float32, sum, root 0)"; ok is false for a shape that is not a typed
// collective's.
func typedShape(kind flight.Kind, shape int64) (string, bool) {
	t := Datatype(uint64(shape) >> 56)
	if !t.Valid() {
		return "", false
	}
	s := " (" + t.String()
	if r := ReduceOp(uint64(shape) >> 48 & 0xff); r != 0 {
		s += ", " + r.String()
	}
	switch kind {
	case flight.KindReduce, flight.KindBcast, flight.KindGather, flight.KindScatter:
		s += fmt.Sprintf(", root %d", uint16(uint64(shape)>>32))
	}
	switch low := uint32(shape); {
	case low < 1<<31:
		return s + fmt.Sprintf(", count %d)", low), true
	case low == noCounts:
		return s + ")", true
	}
	return s + fmt.Sprintf(", counts digest %#08x)", uint32(shape)), true
}

// overlap reports whether a and b share a byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
