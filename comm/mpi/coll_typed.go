//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

var _ interface {
	Collective(context.Context, *typed.Op) error
} = (*mpiComm)(nil)

// typedKind maps a typed collective's kind to cmpi.h's RR_T_ codes.
func typedKind(op *typed.Op) C.int {
	switch op.Kind {
	case flight.KindAllreduce:
		return C.RR_T_ALLREDUCE
	case flight.KindReduce:
		return C.RR_T_REDUCE
	case flight.KindBcast:
		return C.RR_T_BCAST
	case flight.KindAllgather:
		return C.RR_T_ALLGATHERV
	case flight.KindGather:
		return C.RR_T_GATHERV
	case flight.KindScatter:
		return C.RR_T_SCATTERV
	case flight.KindAlltoall:
		return C.RR_T_ALLTOALLV
	case flight.KindReduceScatter:
		return C.RR_T_REDUCE_SCATTER
	}
	return 0
}

// Collective runs comm's typed collectives with MPI's non-blocking
// collectives on MPI's own datatypes and reductions, straight on the
// caller's buffers (pinned while MPI may touch them; an allreduce whose
// input is its output runs in place), polled under the communicator's
// bound like the others. Nothing is copied or reduced in Go.
func (c *mpiComm) Collective(ctx context.Context, op *typed.Op) error {
	name := op.Kind.String()
	if err := op.Check(c.rank, c.size); err != nil {
		return err
	}
	es := op.Type.Size()
	for _, b := range [][]byte{op.Send, op.Recv} {
		if len(b)/es > math.MaxInt32 {
			return fmt.Errorf("%w: %s: %d elements exceed MPI's int count", comm.ErrBadArgument, name, len(b)/es)
		}
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked(name); err != nil {
		return err
	}
	if op.Kind == flight.KindAllreduce && c.direct && len(op.Send) <= directTypedMax {
		return c.allreduceDX(ctx, op)
	}
	co, h := c.co, c.h
	n := c.size
	tc := C.rr_tcounts(co, C.int(n))
	if tc == nil {
		return fmt.Errorf("mpi: %s: out of C memory", name)
	}
	counts := unsafe.Slice((*C.int)(tc), 4*n)
	fill := func(dst []C.int, src []int) {
		for i := range dst {
			dst[i] = 0
			if i < len(src) {
				dst[i] = C.int(src[i])
			}
		}
	}
	fill(counts[0:n], op.SendCounts)
	fill(counts[n:2*n], op.SendDispls)
	fill(counts[2*n:3*n], op.RecvCounts)
	fill(counts[3*n:4*n], op.RecvDispls)
	// The element count of the kinds that take one.
	count := len(op.Send) / es
	switch op.Kind {
	case flight.KindBcast:
		if c.rank != op.Root {
			count = len(op.Recv) / es
		}
	case flight.KindScatter:
		count = len(op.Recv) / es
	}
	sbuf, rbuf := op.Send, op.Recv
	switch op.Kind {
	case flight.KindBcast:
		if c.rank != op.Root {
			sbuf = op.Recv // MPI_Ibcast has one buffer
		}
	case flight.KindGather:
		if c.rank != op.Root {
			rbuf = nil
		}
	case flight.KindScatter:
		if c.rank != op.Root {
			sbuf = nil
		}
	}
	inplace := 0
	if op.Kind == flight.KindAllreduce && len(op.Send) > 0 && unsafe.SliceData(op.Send) == unsafe.SliceData(op.Recv) {
		inplace = 1
	}
	pin := new(runtime.Pinner)
	ptr := func(b []byte) unsafe.Pointer {
		if len(b) == 0 {
			return nil
		}
		pin.Pin(unsafe.SliceData(b))
		return unsafe.Pointer(unsafe.SliceData(b))
	}
	sp, rp := ptr(sbuf), ptr(rbuf)
	// MPI may write the buffers until it completes the operation: if this
	// rank gives up first, the pins go with the orphaned collective.
	c.typedPin = pin
	var err error
	switch {
	case op.Kind == flight.KindAlltoall && c.direct:
		// Every rank of a direct group takes this path whatever its own
		// counts (Alltoallv's differ by rank): the choice must be the
		// group's, or one rank posts MPI_Ialltoallv while its peers run
		// the direct round.
		w := wait{kind: op.Kind}
		err = c.runDXAlltoall(ctx, &w, name, op.Shape(), sp, rp, tc, op.Type)
	default:
		w := wait{kind: op.Kind, mpiColl: true}
		err = c.run(ctx, &w, true, name, "MPI_I"+name, func() C.int {
			return C.rr_ityped(h, co, typedKind(op), C.int(op.Type), C.int(op.Reduce), C.int(op.Root), sp, rp,
				C.int(count), C.int(n), C.int(inplace))
		})
	}
	if c.typedPin != nil { // completed: not handed to the orphans
		c.typedPin = nil
		pin.Unpin()
	}
	return err
}

// directTypedMax is the largest typed allreduce, in bytes per rank, that a
// direct group (coll.go) runs as its one round of messages: every rank
// sends its whole vector to every other one and each reduces locally, in
// rank order (rr_treduce). For the small vectors of a control plane or
// a small gradient bucket that costs what the blocking MPI_Allreduce does,
// where MPI_Iallreduce costs about twice as much (make bench:
// allreduce_f32_4KiB); larger vectors go to MPI, whose algorithms move
// fewer bytes.
const directTypedMax = 64 << 10

// allreduceDX is the direct typed allreduce: this rank's vector, copied to
// C scratch (co.sbuf), goes to every other rank as an all-to-all of
// uniform blocks gathered in rank order (co.rbuf), then reduced in rank
// order into op.Recv (rr_treduce), in the same cgo call when the round
// completes within its spin. Nothing of the caller's is pinned: MPI only
// ever holds C memory, which an orphan keeps. The headers carry the op's
// kind and shape (datatype, reduction, count hash), so a peer in another
// collective, or reducing another datatype, is a desync. collMu held, c
// usable.
func (c *mpiComm) allreduceDX(ctx context.Context, op *typed.Op) error {
	nb, es, n := len(op.Send), op.Type.Size(), c.size
	words := max((nb+7)/8, 1)
	if int(c.co.scap) < words || int(c.co.rcap) < n*words {
		if err := c.reserve("Allreduce", words, n*words, 0, 0); err != nil {
			return err
		}
	}
	if err := c.reserveDX("Allreduce", 0, 2); err != nil {
		return err
	}
	co := c.co
	if nb > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(co.sbuf)), nb), op.Send)
	}
	var out unsafe.Pointer
	if nb > 0 {
		out = unsafe.Pointer(unsafe.SliceData(op.Recv))
	}
	e := c.e
	e.mu.Lock()
	if e.finalized {
		e.mu.Unlock()
		return fmt.Errorf("%w: Allreduce on group %q rank %d: MPI finalized", comm.ErrClosed, c.name, c.rank)
	}
	c.entered++
	w := wait{kind: flight.KindAllreduce}
	h0 := C.int64_t(int64(c.entered<<8) | int64(w.kind))
	yield := C.uintptr_t(uintptr(unsafe.Pointer(e.armYield())))
	rc := C.rr_dx_tallreduce_run_u(C.uintptr_t(uintptr(unsafe.Pointer(c.dx))), h0, C.int64_t(op.Shape()),
		(*C.char)(unsafe.Pointer(co.sbuf)), (*C.char)(unsafe.Pointer(co.rbuf)), C.int(nb/es), C.int(op.Type), C.int(es),
		C.int(op.Reduce), out, spinBudgetNs, yield)
	e.spun()
	if err := c.dxPosted(ctx, &w, "Allreduce", rc); err != nil || c.dx.reduced != 0 || nb == 0 {
		return err
	}
	if rc := C.rr_treduce((*C.char)(unsafe.Pointer(co.rbuf)), C.int(n), C.long(nb), C.int(nb/es), C.int(op.Type), C.int(op.Reduce), out); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: Allreduce on group %q rank %d: MPI_Reduce_local failed (MPI error %d)", c.name, c.rank, int(rc))
	}
	return nil
}
