package comm

// The typed collectives an MPI user expects, over every backend. A backend
// implements one method for the whole family (collectives.Collective, with
// an Op describing the operation, its datatype and its buffers as bytes);
// the generic functions below are what programs call: Allreduce[float32],
// Alltoallv[int64], ... Interfaces cannot carry type parameters, so the
// element type travels as a Datatype.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/rankrun/rankrun/comm/flight"
)

// Datatype is the element type of a typed collective.
type Datatype uint8

// The datatypes.
const (
	dtByte Datatype = iota + 1
	dtInt32
	dtInt64
	dtUint64
	dtFloat32
	dtFloat64
)

func (d Datatype) String() string {
	switch d {
	case dtByte:
		return "byte"
	case dtInt32:
		return "int32"
	case dtInt64:
		return "int64"
	case dtUint64:
		return "uint64"
	case dtFloat32:
		return "float32"
	case dtFloat64:
		return "float64"
	}
	return fmt.Sprintf("Datatype(%d)", uint8(d))
}

// Size is the size of one element in bytes (0 for an unknown type).
func (d Datatype) Size() int {
	switch d {
	case dtByte:
		return 1
	case dtInt32, dtFloat32:
		return 4
	case dtInt64, dtUint64, dtFloat64:
		return 8
	}
	return 0
}

// Valid reports whether d is a defined datatype.
func (d Datatype) Valid() bool { return d >= dtByte && d <= dtFloat64 }

// Float reports whether d is a floating-point type (no bitwise reductions).
func (d Datatype) Float() bool { return d == dtFloat32 || d == dtFloat64 }

// Element is a type the typed collectives carry.
type Element interface {
	~byte | ~int32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// DatatypeOf is the Datatype of T.
func DatatypeOf[T Element]() Datatype {
	var z T
	switch any(z).(type) {
	case byte:
		return dtByte
	case int32:
		return dtInt32
	case int64:
		return dtInt64
	case uint64:
		return dtUint64
	case float32:
		return dtFloat32
	case float64:
		return dtFloat64
	}
	// A named type (~T): tell them apart by size and by whether -1
	// converts to a negative value or a fraction survives.
	switch unsafe.Sizeof(z) {
	case 1:
		return dtByte
	case 4:
		if isFloat[T]() {
			return dtFloat32
		}
		return dtInt32
	default:
		switch {
		case isFloat[T]():
			return dtFloat64
		case isSigned[T]():
			return dtInt64
		}
		return dtUint64
	}
}

func isFloat[T Element]() bool {
	h := T(1)
	h /= 2 // 0 for integers
	return h != 0
}

func isSigned[T Element]() bool {
	var z T
	return z-1 < z
}

// Reductions beyond ReduceOp's integer ones: a product for every type, and
// exclusive or for the integers.
const (
	Prod ReduceOp = BitAnd + 1 + iota
	BitXor
)

// validFor reports whether op reduces elements of type d: sum, prod, min and
// max reduce every type; the bitwise ops the integers (and bytes) only.
func (op ReduceOp) validFor(d Datatype) bool {
	switch op {
	case Sum, Prod, Min, Max:
		return true
	case BitOr, BitAnd, BitXor:
		return !d.Float()
	}
	return false
}

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

// collectives is the typed collective family of a backend communicator
// (every backend of this module has it, and checked mode stamps it).
// Collective runs op on every rank of the group; its arguments are checked
// with Op.Check first, the same error on every backend.
type collectives interface {
	Collective(ctx context.Context, op *Op) error
}

// collectivesOf returns the outermost collectives of c and the
// communicators it wraps (checked mode, which stamps each operation, before
// the backend), or nil.
func collectivesOf(c Comm) collectives {
	return outermost(c, func(collectives) bool { return true })
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
	if reduces && !op.Reduce.validFor(op.Type) {
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

// bytesOf views a slice of elements as its bytes (no copy).
func bytesOf[T Element](s []T) []byte {
	if len(s) == 0 {
		if s == nil {
			return nil
		}
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// run hands op to c's collectives.
func run(ctx context.Context, c Comm, op *Op) error {
	cs := collectivesOf(c)
	if cs == nil {
		return fmt.Errorf("%w: %s: this communicator's backend has no typed collectives", ErrBadArgument, op.Kind)
	}
	return cs.Collective(ctx, op)
}

// Allreduce reduces in element-wise over the group into out on every rank
// (in and out the same length everywhere; they may be the same slice).
//
// Floating-point reductions (sum, prod) are not associative, so the order
// matters. In-process and in simulation it is rank order,
// ((x0 op x1) op x2) ..., the same bits on every rank and every run; under
// MPI it is too for groups of up to 8 ranks and vectors of up to 64 KiB
// (the binding's direct path reduces in rank order with MPI_Reduce_local).
// Larger MPI reductions, and Reduce and ReduceScatter under MPI, take
// MPI's algorithms, whose order MPI does not promise (it recommends, but
// does not require, the same result on every rank): compare their float
// results with a tolerance.
func Allreduce[T Element](ctx context.Context, c Comm, op ReduceOp, in, out []T) error {
	return run(ctx, c, &Op{Kind: flight.KindAllreduce, Type: DatatypeOf[T](), Reduce: op, Send: bytesOf(in), Recv: bytesOf(out)})
}

// Reduce reduces in over the group into out on root (out is ignored
// elsewhere and may be nil there).
func Reduce[T Element](ctx context.Context, c Comm, op ReduceOp, root int, in, out []T) error {
	return run(ctx, c, &Op{Kind: flight.KindReduce, Type: DatatypeOf[T](), Reduce: op, Root: root, Send: bytesOf(in), Recv: bytesOf(out)})
}

// BcastOf sends root's buf to buf on every rank (the same length
// everywhere).
func BcastOf[T Element](ctx context.Context, c Comm, root int, buf []T) error {
	b := bytesOf(buf)
	op := &Op{Kind: flight.KindBcast, Type: DatatypeOf[T](), Root: root, Recv: b}
	if c.Rank() == root {
		op.Send, op.Recv = b, nil
	}
	return run(ctx, c, op)
}

// Allgather gathers every rank's in (the same length on every rank) into
// out, rank 0's first, on every rank; out holds Size()*len(in) elements.
func Allgather[T Element](ctx context.Context, c Comm, in, out []T) error {
	counts, displs := equal(c.Size(), len(in))
	return run(ctx, c, &Op{Kind: flight.KindAllgather, Type: DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: displs})
}

// Allgatherv gathers rank r's in (counts[r] elements) into out at
// displs[r], on every rank (every rank passes the same counts and
// displacements; nil displacements pack the contributions in rank order).
func Allgatherv[T Element](ctx context.Context, c Comm, in, out []T, counts, displs []int) error {
	return run(ctx, c, &Op{Kind: flight.KindAllgather, Type: DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: packed(counts, displs)})
}

// Gather gathers every rank's in (the same length) into out on root, rank
// 0's first (out is ignored elsewhere).
func Gather[T Element](ctx context.Context, c Comm, root int, in, out []T) error {
	counts, displs := equal(c.Size(), len(in))
	return run(ctx, c, &Op{Kind: flight.KindGather, Type: DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: displs})
}

// Gatherv gathers rank r's in (counts[r] elements) into out at displs[r]
// on root (counts and displacements are read on root only).
func Gatherv[T Element](ctx context.Context, c Comm, root int, in, out []T, counts, displs []int) error {
	return run(ctx, c, &Op{Kind: flight.KindGather, Type: DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: packed(counts, displs)})
}

// Scatter sends the r-th len(out) elements of root's in to rank r's out.
func Scatter[T Element](ctx context.Context, c Comm, root int, in, out []T) error {
	counts, displs := equal(c.Size(), len(out))
	return run(ctx, c, &Op{Kind: flight.KindScatter, Type: DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), SendCounts: counts, SendDispls: displs})
}

// Scatterv sends counts[r] elements of root's in, from displs[r], to rank
// r's out (counts and displacements are read on root only).
func Scatterv[T Element](ctx context.Context, c Comm, root int, in, out []T, counts, displs []int) error {
	return run(ctx, c, &Op{Kind: flight.KindScatter, Type: DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), SendCounts: counts, SendDispls: packed(counts, displs)})
}

// Alltoall sends the r-th block of len(in)/Size() elements of in to rank
// r, which receives it as the block of this rank in its out.
func Alltoall[T Element](ctx context.Context, c Comm, in, out []T) error {
	n := c.Size()
	if len(in)%n != 0 || len(out) != len(in) {
		return fmt.Errorf("%w: Alltoall: %d elements to send and %d to receive, want the same multiple of the %d ranks", ErrBadArgument, len(in), len(out), n)
	}
	counts, displs := equal(n, len(in)/n)
	return run(ctx, c, &Op{Kind: flight.KindAlltoall, Type: DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out),
		SendCounts: counts, SendDispls: displs, RecvCounts: counts, RecvDispls: displs})
}

// Alltoallv sends sendCounts[r] elements of in from sendDispls[r] to rank r,
// and receives recvCounts[r] elements from rank r into out at recvDispls[r]
// (nil displacements pack in rank order). What rank i sends rank j must be
// what j expects from i.
func Alltoallv[T Element](ctx context.Context, c Comm, in []T, sendCounts, sendDispls []int, out []T, recvCounts, recvDispls []int) error {
	return run(ctx, c, &Op{Kind: flight.KindAlltoall, Type: DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out),
		SendCounts: sendCounts, SendDispls: packed(sendCounts, sendDispls), RecvCounts: recvCounts, RecvDispls: packed(recvCounts, recvDispls)})
}

// ReduceScatter reduces in (the sum of counts elements, the same on every
// rank) element-wise over the group and leaves block r of the result
// (counts[r] elements) in rank r's out.
func ReduceScatter[T Element](ctx context.Context, c Comm, op ReduceOp, in, out []T, counts []int) error {
	return run(ctx, c, &Op{Kind: flight.KindReduceScatter, Type: DatatypeOf[T](), Reduce: op, Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts})
}

// equal returns n counts of k and their packed displacements.
func equal(n, k int) ([]int, []int) {
	counts, displs := make([]int, n), make([]int, n)
	for r := range n {
		counts[r], displs[r] = k, r*k
	}
	return counts, displs
}

// packed returns displs, or the displacements that pack counts in rank
// order when displs is nil.
func packed(counts, displs []int) []int {
	if displs != nil || counts == nil {
		return displs
	}
	out := make([]int, len(counts))
	at := 0
	for r, n := range counts {
		out[r] = at
		at += max(n, 0)
	}
	return out
}

// Sendrecv sends send to dest (tag sendTag) and receives into recv from
// src (tag recvTag) at once, so that ranks that all send before they
// receive do not wait on each other. It returns how many elements arrived.
//
// When the receive fails Sendrecv returns at once, without waiting on the
// send as well: the send stays in flight (a send cannot be withdrawn),
// reading send until a peer matches it. A receive still in flight (ctx
// ended, or the backend's bound on waits passed) is withdrawn first, so
// recv is free when Sendrecv returns; one that matched just then counts
// if it has landed, and otherwise the error says recv is still in use.
func Sendrecv[T Element](ctx context.Context, c Comm, send []T, dest, sendTag int, recv []T, src, recvTag int) (int, error) {
	rq, err := IrecvOf(c, recv, src, recvTag)
	if err != nil {
		return 0, err
	}
	sq, err := IsendOf(c, send, dest, sendTag)
	if err != nil {
		_ = rq.Cancel()
		return 0, err
	}
	st, rerr := rq.Wait(ctx)
	if rerr != nil && (errors.Is(rerr, ErrWaitTimeout) || ctx.Err() != nil) {
		// Still in flight: withdraw it. One that matched meanwhile cannot
		// be: if it has landed, it counts.
		cerr := rq.Cancel()
		if cerr == nil {
			return 0, rerr
		}
		tst, done, terr := rq.Test()
		if !done {
			return 0, errors.Join(rerr, fmt.Errorf("Sendrecv: the receive matched as it was withdrawn and is still arriving (recv stays in use until it lands): %w", cerr))
		}
		st, rerr = tst, terr
	}
	if rerr != nil {
		return 0, rerr // the receive completed, with an error
	}
	if _, err := sq.Wait(ctx); err != nil {
		return 0, err
	}
	return st.Len / DatatypeOf[T]().Size(), nil
}

// IsendOf starts sending buf's elements to dest with tag (Comm.Isend on
// their bytes; Status.Len counts bytes).
func IsendOf[T Element](c Comm, buf []T, dest, tag int) (Request, error) {
	return c.Isend(bytesOf(buf), dest, tag)
}

// IrecvOf starts receiving elements into buf from src with tag (Comm.Irecv
// on its bytes; Status.Len counts bytes).
func IrecvOf[T Element](c Comm, buf []T, src, tag int) (Request, error) {
	return c.Irecv(bytesOf(buf), src, tag)
}

// Dup returns a new communicator over the same ranks, in the same order
// (collective: a Split with one color).
func Dup(ctx context.Context, c Comm) (Comm, error) { return c.Split(ctx, 0, c.Rank()) }
