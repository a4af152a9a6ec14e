//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// directMax is the largest group whose Barrier, AllreduceInt64,
// AllgatherInt64s, Bcast (and Split's barrier) are direct: one round in which every
// rank sends one message to each other rank and receives one from each
// (cmpi.h, "Direct collectives"). That is n-1 messages each way per rank,
// fine for small groups (the TP and PP groups a serving control plane
// agrees over); larger groups use MPI's non-blocking collectives, whose
// algorithms scale (recursive doubling, rings).
const directMax = 8

// inlineValues is how many values an allgather contribution may hold and
// still travel in one message with its header; a longer one follows its
// header in a second message.
const inlineValues = C.RR_INLINE

// wait is one collective's waiting state, shared by its MPI operations
// (the non-blocking AllgatherInt64s and Bcast make two), so that the bound
// covers them all.
type wait struct {
	kind  flight.Kind
	start time.Time // when the first poll came back empty (zero until then)
	// mpiColl: the operation is one of MPI's non-blocking collectives (on
	// c.co) even in a group whose own collectives are direct (typed
	// collectives always are).
	mpiColl bool
}

// abandon gives up the collective in flight: its C state goes to the
// engine's orphans (MPI still owns the buffers) and the group is broken.
// collMu held.
func (c *mpiComm) abandon(op string, cause error) error {
	return c.orphan(fmt.Errorf("mpi: %s on group %q rank %d abandoned, group broken: %w", op, c.name, c.rank, cause))
}

// orphan hands the collective state to the engine, which frees it once
// MPI has completed every operation posted with it (at once when none is in
// flight), and breaks c with err, which it returns. collMu held.
func (c *mpiComm) orphan(err error) error {
	c.e.mu.Lock()
	c.orphanLocked()
	c.e.mu.Unlock()
	c.breakWith(err)
	return err
}

// orphanLocked hands c.co and c.dx to the engine. e.mu and collMu held.
func (c *mpiComm) orphanLocked() {
	if c.co != nil || c.dx != nil {
		c.e.orphans = append(c.e.orphans, orphan{co: c.co, dx: c.dx, pin: c.typedPin})
		c.typedPin = nil
	}
	if c.dx != nil {
		c.dxLost = true
	}
	c.co, c.dx = nil, nil
}

// failLocked turns MPI's return code into an error, orphans the collective
// and breaks c. e.mu held (mpiError calls MPI); collMu held.
func (c *mpiComm) failLocked(rc C.int, op, call string) error {
	err := mpiError(rc, op, call, c.name, c.rank)
	c.orphanLocked()
	c.breakWith(err)
	return err
}

// run posts one operation of a non-blocking MPI collective with post
// (called with e.mu held) and waits for it. enter says the collective
// starts with it (it is then counted). collMu held.
func (c *mpiComm) run(ctx context.Context, w *wait, enter bool, op, call string, post func() C.int) error {
	e := c.e
	e.mu.Lock()
	if e.finalized {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s on group %q rank %d: MPI finalized", comm.ErrClosed, op, c.name, c.rank)
	}
	if enter {
		c.entered++
	}
	rc := post()
	if rc == C.MPI_SUCCESS {
		// A first spin in the same lock hold: small collectives usually
		// complete here.
		rc = C.rr_test_spin(c.co, spinBudgetNs, e.armYield())
		e.spun()
	}
	if rc != C.MPI_SUCCESS {
		err := c.failLocked(rc, op, call)
		e.mu.Unlock()
		return err
	}
	e.mu.Unlock()
	if c.co.flag != 0 {
		return nil
	}
	return e.waitColl(ctx, c, w, op)
}

// runDX runs a direct collective: kind, this rank's shape h1 and plen
// bytes of payload (already in dx.sbuf after the header); for a Bcast
// (kind RR_DX_BCAST) h1 is the root and plen the bytes it sends. It is counted,
// posted and spun in one cgo call, so a collective whose peers are there
// completes without returning to Go in between. collMu held.
func (c *mpiComm) runDX(ctx context.Context, w *wait, op string, kind C.int, h1 int64, plen int) error {
	e := c.e
	d := c.dx
	e.mu.Lock()
	if e.finalized {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s on group %q rank %d: MPI finalized", comm.ErrClosed, op, c.name, c.rank)
	}
	c.entered++
	h0 := C.int64_t(int64(c.entered<<8) | int64(w.kind))
	var rc C.int
	yield := C.uintptr_t(uintptr(unsafe.Pointer(e.armYield())))
	if kind == C.RR_DX_BCAST {
		rc = C.rr_dx_bcast_run_u(C.uintptr_t(uintptr(unsafe.Pointer(d))), C.int(h1), h0, C.long(plen), spinBudgetNs, yield)
	} else {
		rc = C.rr_dx_run_u(C.uintptr_t(uintptr(unsafe.Pointer(d))), kind, h0, C.int64_t(h1), C.long(plen), spinBudgetNs, yield)
	}
	e.spun()
	return c.dxPosted(ctx, w, op, rc)
}

// runDXAlltoall runs a direct typed all-to-all (rr_dx_a2a_run_u): h1 is
// the op's shape, in and out the caller's pinned buffers, c4 the counts
// and displacements in elements of dt. collMu held.
func (c *mpiComm) runDXAlltoall(ctx context.Context, w *wait, op string, h1 int64, in, out unsafe.Pointer, c4 *C.int, dt typed.Datatype) error {
	// Room for this rank's header and a header from each peer.
	if err := c.reserveDX(op, 0, 2); err != nil {
		return err
	}
	e := c.e
	e.mu.Lock()
	if e.finalized {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s on group %q rank %d: MPI finalized", comm.ErrClosed, op, c.name, c.rank)
	}
	c.entered++
	h0 := C.int64_t(int64(c.entered<<8) | int64(w.kind))
	yield := C.uintptr_t(uintptr(unsafe.Pointer(e.armYield())))
	rc := C.rr_dx_a2a_run_u(C.uintptr_t(uintptr(unsafe.Pointer(c.dx))), h0, C.int64_t(h1), (*C.char)(in), (*C.char)(out), c4,
		C.int(dt), C.int(dt.Size()), spinBudgetNs, yield)
	e.spun()
	return c.dxPosted(ctx, w, op, rc)
}

// dxPosted finishes a direct collective's first cgo call (rc its MPI
// code): done, a desync, or a wait under the bound. e.mu held; it
// unlocks it.
func (c *mpiComm) dxPosted(ctx context.Context, w *wait, op string, rc C.int) error {
	e, d := c.e, c.dx
	if rc != C.MPI_SUCCESS {
		err := c.failLocked(rc, op, "MPI_Isend/Irecv/Testsome")
		e.mu.Unlock()
		return err
	}
	e.mu.Unlock()
	if d.flag != 0 {
		return nil
	}
	if d.bad != 0 {
		return c.orphan(c.mismatch(w.kind))
	}
	return e.waitColl(ctx, c, w, op)
}

// waitColl polls c's collective in flight (direct or not) until MPI
// completes it, ctx ends, c is closed, or c's bound passes (counted from
// w.start: the first empty poll of the collective). On any early return
// the collective is orphaned and c broken: the caller must not touch c.co
// or c.dx again. collMu held.
func (e *engine) waitColl(ctx context.Context, c *mpiComm, w *wait, op string) error {
	done := ctx.Done()
	co, d := c.co, c.dx
	direct := c.direct && !w.mpiColl
	waitStart := time.Now()
	if w.start.IsZero() {
		w.start = waitStart
	}
	bound := c.timeout + kit.GraceOf(ctx)
	deadline := w.start.Add(bound)
	asked := 0 // the "returned" notices already followed up
	for i := 0; ; i++ {
		e.mu.Lock()
		gone := c.gone
		long := e.sleepy() || time.Since(waitStart) >= sleepAfter
		budget := C.int64_t(spinBudgetNs)
		if long {
			budget = 0
		}
		var rc C.int
		if direct {
			rc = C.rr_dx_spin(d, budget, e.armYield())
		} else {
			rc = C.rr_test_spin(co, budget, e.armYield())
		}
		e.spun()
		if i%serviceEvery == serviceEvery-1 {
			e.serviceLocked()
		}
		if rc != C.MPI_SUCCESS {
			err := c.failLocked(rc, op, "MPI_Test")
			e.mu.Unlock()
			return err
		}
		e.mu.Unlock()
		switch {
		case direct && d.flag != 0, !direct && co.flag != 0:
			return nil
		case direct && d.bad != 0:
			return c.orphan(c.mismatch(w.kind))
		}
		if done != nil {
			select {
			case <-done:
				return c.abandon(op, ctx.Err())
			default:
			}
		}
		if c.closed.Load() {
			return c.abandon(op, comm.ErrClosed)
		}
		if !time.Now().Before(deadline) {
			return c.timedOut(w.kind, bound)
		}
		if gone > asked {
			asked = gone
			if err := c.leftByReturned(w.kind); err != nil {
				return err
			}
		}
		backoff(long)
	}
}

// mismatch describes the message that did not match this rank's direct
// collective (dx.bad): a peer in another collective (a desync), or one of
// another shape. collMu held.
func (c *mpiComm) mismatch(kind flight.Kind) error {
	d := c.dx
	peer, h0, h1 := int(d.bad_peer), int64(d.bad_h0), int64(d.bad_h1)
	seq := uint64(h0) >> 8
	mine := fmt.Sprintf("%s #%d%s", kind, c.enteredNow(), shape(kind, int64(d.h1)))
	note := ""
	if d.bad == C.RR_BAD_LENGTH {
		note = fmt.Sprintf(" in %d bytes, which do not fit", int(d.bad_len))
		if d.bad_len < 0 {
			note = " in a longer message"
		}
	}
	return fmt.Errorf("%w on group %q: %s is in %s, %s sent %s #%d%s%s",
		comm.ErrDesync, c.name, kit.Who(c.worlds, c.rank), mine, kit.Who(c.worlds, peer), flight.Kind(h0&0xff), seq, shape(flight.Kind(h0&0xff), h1), note)
}

func (c *mpiComm) enteredNow() uint64 {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	return c.entered
}

// shape renders a direct collective's header shape.
func shape(kind flight.Kind, h1 int64) string {
	if uint64(h1)>>56 != 0 { // a typed collective's (typed.Op.Shape)
		return typed.DescribeShape(kind, h1)
	}
	switch kind {
	case flight.KindAllreduce:
		return fmt.Sprintf(" (count %d, %s)", h1>>8, comm.ReduceOp(h1&0xff))
	case flight.KindAllgather:
		return fmt.Sprintf(" (%d values)", h1)
	case flight.KindBcast:
		if h1 >= 0 {
			return fmt.Sprintf(" (%d bytes)", h1)
		}
	}
	return ""
}

func (c *mpiComm) reserve(op string, ns, nr, m, b int) error {
	if C.rr_reserve(c.co, C.long(ns), C.long(nr), C.int(m), C.long(b)) != 0 {
		return fmt.Errorf("mpi: %s on group %q rank %d: cannot allocate scratch buffers", op, c.name, c.rank)
	}
	return nil
}

// reserveDX makes room in c.dx for ns values sent and a receive slot of
// rslot int64s per peer (a cgo call only when the buffers must grow).
func (c *mpiComm) reserveDX(op string, ns, rslot int) error {
	d := c.dx
	if int(d.scap) >= ns+2 && int(d.rcap) >= rslot*max(c.size-1, 1) {
		d.rslot = C.long(rslot)
		return nil
	}
	if C.rr_dx_reserve(d, C.long(ns), C.long(rslot)) != 0 {
		return fmt.Errorf("mpi: %s on group %q rank %d: cannot allocate scratch buffers", op, c.name, c.rank)
	}
	return nil
}

// int64s views n int64s of C memory at p (nil for n == 0).
func int64s(p *C.int64_t, n int) []int64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(p)), n)
}

// at is p + off (in int64s).
func at(p *C.int64_t, off int) *C.int64_t {
	return (*C.int64_t)(unsafe.Add(unsafe.Pointer(p), off*8))
}

func (c *mpiComm) Barrier(ctx context.Context) error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("Barrier"); err != nil {
		return err
	}
	return c.barrierLocked(ctx, flight.KindBarrier, "Barrier")
}

// barrierLocked is Barrier (also Split's first step, kind KindSplit).
// collMu held, c usable.
func (c *mpiComm) barrierLocked(ctx context.Context, kind flight.Kind, op string) error {
	w := wait{kind: kind}
	if c.direct {
		if err := c.reserveDX(op, 0, 2); err != nil {
			return err
		}
		return c.runDX(ctx, &w, op, C.RR_DX_BARRIER, 0, 0)
	}
	co, h := c.co, c.h
	return c.run(ctx, &w, true, op, "MPI_Ibarrier", func() C.int { return C.rr_ibarrier(h, co) })
}

func (c *mpiComm) AllreduceInt64(ctx context.Context, op comm.ReduceOp, in, out []int64) error {
	if !typed.Valid(op) {
		return fmt.Errorf("%w: AllreduceInt64: unknown op %v", comm.ErrBadArgument, op)
	}
	if len(in) != len(out) {
		return fmt.Errorf("%w: AllreduceInt64: len(in)=%d != len(out)=%d", comm.ErrBadArgument, len(in), len(out))
	}
	n := len(in)
	if n > math.MaxInt32-2 {
		return fmt.Errorf("%w: AllreduceInt64: %d values exceed MPI's int count", comm.ErrBadArgument, n)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("AllreduceInt64"); err != nil {
		return err
	}
	w := wait{kind: flight.KindAllreduce}
	if c.direct {
		if err := c.reserveDX("AllreduceInt64", n, 2+n); err != nil {
			return err
		}
		d := c.dx
		mine := int64s(at(d.sbuf, 2), n)
		copy(mine, in)
		if err := c.runDX(ctx, &w, "AllreduceInt64", C.RR_DX_ALLREDUCE, int64(n)<<8|int64(op), 8*n); err != nil {
			return err
		}
		// Integer sum, min, max, or and and are associative and
		// commutative: every rank computes the same result in any order.
		copy(out, mine)
		for i := range c.size - 1 {
			typed.Apply(op, out, int64s(at(d.rbuf, i*(2+n)+2), n))
		}
		return nil
	}
	if err := c.reserve("AllreduceInt64", n, n, 0, 0); err != nil {
		return err
	}
	co, h := c.co, c.h
	copy(int64s(co.sbuf, n), in)
	err := c.run(ctx, &w, true, "AllreduceInt64", "MPI_Iallreduce", func() C.int { return C.rr_iallreduce(h, co, C.int(n), C.int(op)) })
	if err != nil {
		return err
	}
	copy(out, int64s(co.rbuf, n))
	return nil
}

func (c *mpiComm) AllgatherInt64s(ctx context.Context, in []int64, out *comm.Gathered) error {
	if out == nil {
		return fmt.Errorf("%w: AllgatherInt64s: nil output", comm.ErrBadArgument)
	}
	n := len(in)
	if n > math.MaxInt32-2 {
		return fmt.Errorf("%w: AllgatherInt64s: %d values exceed MPI's int count", comm.ErrBadArgument, n)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("AllgatherInt64s"); err != nil {
		return err
	}
	w := wait{kind: flight.KindAllgather}
	if c.direct {
		return c.allgatherDX(ctx, &w, in, out)
	}
	if err := c.reserve("AllgatherInt64s", n, 0, c.size, 0); err != nil {
		return err
	}
	co, h := c.co, c.h
	co.mycount = C.int(n)
	copy(int64s(co.sbuf, n), in)
	if err := c.run(ctx, &w, true, "AllgatherInt64s", "MPI_Iallgather", func() C.int { return C.rr_iallgather_counts(h, co) }); err != nil {
		return err
	}
	// Every rank now holds the same counts, so every rank takes the same
	// branch below.
	total := int(C.rr_displs(co, C.int(c.size)))
	if total < 0 {
		return fmt.Errorf("%w: AllgatherInt64s on group %q: the gathered total exceeds MPI's int count", comm.ErrBadArgument, c.name)
	}
	if total > 0 {
		if err := c.reserve("AllgatherInt64s", n, total, c.size, 0); err != nil {
			// Other ranks go on into the allgatherv: the group cannot pair
			// collectives any more.
			c.breakWith(err)
			return err
		}
		co = c.co
		if err := c.run(ctx, &w, false, "AllgatherInt64s", "MPI_Iallgatherv", func() C.int { return C.rr_iallgatherv(h, co) }); err != nil {
			return err
		}
	}
	counts := unsafe.Slice((*int32)(unsafe.Pointer(co.counts)), c.size)
	flat := out.ResetFunc(c.size, func(r int) int { return int(counts[r]) })
	copy(flat, int64s(co.rbuf, total))
	return nil
}

// allgatherDX is the direct AllgatherInt64s: one round, each rank's count
// in its message header. collMu held, c usable.
func (c *mpiComm) allgatherDX(ctx context.Context, w *wait, in []int64, out *comm.Gathered) error {
	n := len(in)
	const slot = 2 + inlineValues
	if err := c.reserveDX("AllgatherInt64s", n, slot); err != nil {
		return err
	}
	d := c.dx
	copy(int64s(at(d.sbuf, 2), n), in)
	if err := c.runDX(ctx, w, "AllgatherInt64s", C.RR_DX_ALLGATHER, int64(n), 8*n); err != nil {
		return err
	}
	np := c.size - 1
	got := unsafe.Slice((*int64)(unsafe.Pointer(d.got)), np) // bytes
	flat := out.ResetFunc(c.size, func(r int) int {
		if r == c.rank {
			return n
		}
		return int(got[c.peerIndex(r)] / 8)
	})
	obuf := unsafe.Slice(d.obuf, np)
	off := 0
	for r := range c.size {
		var src []int64
		switch i := c.peerIndex(r); {
		case r == c.rank:
			src = in
		case got[i] > inlineValues*8:
			src = int64s((*C.int64_t)(unsafe.Pointer(obuf[i])), int(got[i]/8))
		default:
			src = int64s(at(d.rbuf, i*slot+2), int(got[i]/8))
		}
		off += copy(flat[off:], src)
	}
	return nil
}

// peerIndex is rank r's index among c's peers (the ranks other than this
// one), as the direct collectives' C state orders them.
func (c *mpiComm) peerIndex(r int) int {
	if r > c.rank {
		return r - 1
	}
	return r
}

// bcastDX is the direct Bcast: the root sends its bytes (in the header
// message when they fit, after it otherwise) to every other rank. collMu
// held, c usable.
func (c *mpiComm) bcastDX(ctx context.Context, w *wait, root int, data []byte) ([]byte, error) {
	const slot = 2 + inlineValues
	n := 0
	if c.rank == root {
		n = len(data)
	}
	if err := c.reserveDX("Bcast", (n+7)/8, slot); err != nil {
		return nil, err
	}
	d := c.dx
	if n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(at(d.sbuf, 2))), n), data)
	}
	if err := c.runDX(ctx, w, "Bcast", C.RR_DX_BCAST, int64(root), n); err != nil {
		return nil, err
	}
	if c.rank == root {
		return data, nil
	}
	i := c.peerIndex(root)
	m := int(unsafe.Slice((*int64)(unsafe.Pointer(d.got)), c.size-1)[i])
	var src *byte
	if m > inlineValues*8 {
		src = (*byte)(unsafe.Pointer(unsafe.Slice(d.obuf, c.size-1)[i]))
	} else {
		src = (*byte)(unsafe.Pointer(at(d.rbuf, i*slot+2)))
	}
	if m == 0 {
		return data[:0], nil
	}
	return append(data[:0], unsafe.Slice(src, m)...), nil
}

func (c *mpiComm) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("%w: Bcast: root %d outside 0..%d", comm.ErrBadArgument, root, c.size-1)
	}
	if len(data) > math.MaxInt32-16 {
		return nil, fmt.Errorf("%w: Bcast: %d bytes exceed MPI's int count", comm.ErrBadArgument, len(data))
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("Bcast"); err != nil {
		return nil, err
	}
	w := wait{kind: flight.KindBcast}
	if c.direct {
		return c.bcastDX(ctx, &w, root, data)
	}
	co, h := c.co, c.h
	if c.rank == root {
		co.len = C.int64_t(len(data))
	}
	if err := c.run(ctx, &w, true, "Bcast", "MPI_Ibcast(length)", func() C.int { return C.rr_ibcast_len(h, co, C.int(root)) }); err != nil {
		return nil, err
	}
	n := int64(co.len)
	if n > math.MaxInt32 {
		// Every rank saw the same length: all fail alike.
		return nil, fmt.Errorf("%w: Bcast on group %q: %d bytes exceed MPI's int count", comm.ErrBadArgument, c.name, n)
	}
	if n > 0 {
		if err := c.reserve("Bcast", 0, 0, 0, int(n)); err != nil {
			c.breakWith(err)
			return nil, err
		}
		co = c.co
		buf := unsafe.Slice((*byte)(unsafe.Pointer(co.bbuf)), n)
		if c.rank == root {
			copy(buf, data)
		}
		if err := c.run(ctx, &w, false, "Bcast", "MPI_Ibcast", func() C.int { return C.rr_ibcast_data(h, co, C.int(n), C.int(root)) }); err != nil {
			return nil, err
		}
		if c.rank != root {
			data = append(data[:0], buf...)
		}
	} else if c.rank != root {
		data = data[:0]
	}
	return data, nil
}
