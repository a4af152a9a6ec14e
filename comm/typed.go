package comm

// The typed collectives an MPI user expects, over every backend. A backend
// implements one method for the whole family (collectives.Collective, with
// a typed.Op describing the operation, its datatype and its buffers as
// bytes: comm/internal/typed); the generic functions below are what
// programs call: Allreduce[float32], Alltoallv[int64], ... Interfaces
// cannot carry type parameters, so the element type travels as a
// typed.Datatype.

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// Element is a type the typed collectives carry.
type Element = typed.Element

// collectives is the typed collective family of a backend communicator
// (every backend of this module has it, and checked mode stamps it).
// Collective runs op on every rank of the group; its arguments are checked
// with typed.Op.Check first, the same error on every backend.
type collectives interface {
	Collective(ctx context.Context, op *typed.Op) error
}

// collectivesOf returns the outermost collectives of c and the
// communicators it wraps (checked mode, which stamps each operation, before
// the backend), or nil.
func collectivesOf(c Comm) collectives {
	return outermost(c, func(collectives) bool { return true })
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
func run(ctx context.Context, c Comm, op *typed.Op) error {
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
	return run(ctx, c, &typed.Op{Kind: flight.KindAllreduce, Type: typed.DatatypeOf[T](), Reduce: op, Send: bytesOf(in), Recv: bytesOf(out)})
}

// Reduce reduces in over the group into out on root (out is ignored
// elsewhere and may be nil there).
func Reduce[T Element](ctx context.Context, c Comm, op ReduceOp, root int, in, out []T) error {
	return run(ctx, c, &typed.Op{Kind: flight.KindReduce, Type: typed.DatatypeOf[T](), Reduce: op, Root: root, Send: bytesOf(in), Recv: bytesOf(out)})
}

// BcastOf sends root's buf to buf on every rank (the same length
// everywhere).
func BcastOf[T Element](ctx context.Context, c Comm, root int, buf []T) error {
	b := bytesOf(buf)
	op := &typed.Op{Kind: flight.KindBcast, Type: typed.DatatypeOf[T](), Root: root, Recv: b}
	if c.Rank() == root {
		op.Send, op.Recv = b, nil
	}
	return run(ctx, c, op)
}

// Allgather gathers every rank's in (the same length on every rank) into
// out, rank 0's first, on every rank; out holds Size()*len(in) elements.
func Allgather[T Element](ctx context.Context, c Comm, in, out []T) error {
	counts, displs := equal(c.Size(), len(in))
	return run(ctx, c, &typed.Op{Kind: flight.KindAllgather, Type: typed.DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: displs})
}

// Allgatherv gathers rank r's in (counts[r] elements) into out at
// displs[r], on every rank (every rank passes the same counts and
// displacements; nil displacements pack the contributions in rank order).
func Allgatherv[T Element](ctx context.Context, c Comm, in, out []T, counts, displs []int) error {
	return run(ctx, c, &typed.Op{Kind: flight.KindAllgather, Type: typed.DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: packed(counts, displs)})
}

// Gather gathers every rank's in (the same length) into out on root, rank
// 0's first (out is ignored elsewhere).
func Gather[T Element](ctx context.Context, c Comm, root int, in, out []T) error {
	counts, displs := equal(c.Size(), len(in))
	return run(ctx, c, &typed.Op{Kind: flight.KindGather, Type: typed.DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: displs})
}

// Gatherv gathers rank r's in (counts[r] elements) into out at displs[r]
// on root (counts and displacements are read on root only).
func Gatherv[T Element](ctx context.Context, c Comm, root int, in, out []T, counts, displs []int) error {
	return run(ctx, c, &typed.Op{Kind: flight.KindGather, Type: typed.DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts, RecvDispls: packed(counts, displs)})
}

// Scatter sends the r-th len(out) elements of root's in to rank r's out.
func Scatter[T Element](ctx context.Context, c Comm, root int, in, out []T) error {
	counts, displs := equal(c.Size(), len(out))
	return run(ctx, c, &typed.Op{Kind: flight.KindScatter, Type: typed.DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), SendCounts: counts, SendDispls: displs})
}

// Scatterv sends counts[r] elements of root's in, from displs[r], to rank
// r's out (counts and displacements are read on root only).
func Scatterv[T Element](ctx context.Context, c Comm, root int, in, out []T, counts, displs []int) error {
	return run(ctx, c, &typed.Op{Kind: flight.KindScatter, Type: typed.DatatypeOf[T](), Root: root, Send: bytesOf(in), Recv: bytesOf(out), SendCounts: counts, SendDispls: packed(counts, displs)})
}

// Alltoall sends the r-th block of len(in)/Size() elements of in to rank
// r, which receives it as the block of this rank in its out.
func Alltoall[T Element](ctx context.Context, c Comm, in, out []T) error {
	n := c.Size()
	if len(in)%n != 0 || len(out) != len(in) {
		return fmt.Errorf("%w: Alltoall: %d elements to send and %d to receive, want the same multiple of the %d ranks", ErrBadArgument, len(in), len(out), n)
	}
	counts, displs := equal(n, len(in)/n)
	return run(ctx, c, &typed.Op{Kind: flight.KindAlltoall, Type: typed.DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out),
		SendCounts: counts, SendDispls: displs, RecvCounts: counts, RecvDispls: displs})
}

// Alltoallv sends sendCounts[r] elements of in from sendDispls[r] to rank r,
// and receives recvCounts[r] elements from rank r into out at recvDispls[r]
// (nil displacements pack in rank order). What rank i sends rank j must be
// what j expects from i.
func Alltoallv[T Element](ctx context.Context, c Comm, in []T, sendCounts, sendDispls []int, out []T, recvCounts, recvDispls []int) error {
	return run(ctx, c, &typed.Op{Kind: flight.KindAlltoall, Type: typed.DatatypeOf[T](), Send: bytesOf(in), Recv: bytesOf(out),
		SendCounts: sendCounts, SendDispls: packed(sendCounts, sendDispls), RecvCounts: recvCounts, RecvDispls: packed(recvCounts, recvDispls)})
}

// ReduceScatter reduces in (the sum of counts elements, the same on every
// rank) element-wise over the group and leaves block r of the result
// (counts[r] elements) in rank r's out.
func ReduceScatter[T Element](ctx context.Context, c Comm, op ReduceOp, in, out []T, counts []int) error {
	return run(ctx, c, &typed.Op{Kind: flight.KindReduceScatter, Type: typed.DatatypeOf[T](), Reduce: op, Send: bytesOf(in), Recv: bytesOf(out), RecvCounts: counts})
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
	return st.Len / typed.DatatypeOf[T]().Size(), nil
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
