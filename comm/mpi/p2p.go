//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/internal/args"
)

// errCancelled is the error a cancelled receive reports from Test and Wait.
var errCancelled = errors.New("mpi: receive cancelled")

// request is a point-to-point operation. The Go buffer is pinned
// (runtime.Pinner) from posting until MPI completes the request, and the
// engine holds the request in its in-flight list for as long: a caller may
// drop a request it no longer waits for (an error path does), and the pin
// and the buffer must outlive it for as long as MPI may write there. The
// responder reaps dropped requests once MPI completes them (reapLocked).
type request struct {
	c    *mpiComm
	recv bool
	peer int
	tag  int
	n    int

	// Guarded by c.e.mu (every MPI call is made under it anyway).
	p    *C.rr_p2p       // nil once done
	pin  *runtime.Pinner // from the engine's pool; nil when nothing is pinned
	idx  int             // index in c.e.inflight while in flight
	done bool
	st   comm.Status
	err  error
	// cancelling: MPI_Cancel was called; the request is completed by
	// rr_p2p_cancel_poll, which tells a withdrawn receive from one that
	// had matched.
	cancelling bool
}

func (c *mpiComm) post(op string, buf []byte, peer, tag int, recv bool) (comm.Request, error) {
	if buf == nil {
		return nil, fmt.Errorf("%w: %s on group %q rank %d: nil buffer", comm.ErrBadArgument, op, c.name, c.rank)
	}
	if err := args.Check(c, op, peer, tag, recv); err != nil {
		return nil, err
	}
	if len(buf) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %s: %d bytes exceed MPI's int count", comm.ErrBadArgument, op, len(buf))
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("%w: %s on group %q rank %d", comm.ErrClosed, op, c.name, c.rank)
	}
	r := &request{c: c, recv: recv, peer: peer, tag: tag, n: len(buf)}
	r.p = C.rr_p2p_new()
	if r.p == nil {
		return nil, fmt.Errorf("mpi: %s: out of C memory", op)
	}
	var ptr unsafe.Pointer
	e := c.e
	e.mu.Lock()
	if len(buf) > 0 {
		r.pin = e.pinnerLocked()
		r.pin.Pin(&buf[0])
		ptr = unsafe.Pointer(&buf[0])
	}
	var rc C.int
	switch {
	case e.finalized:
		rc = -1
	case recv:
		rc = C.rr_irecv(c.h, r.p, ptr, C.int(len(buf)), C.int(peer), C.int(tag))
	default:
		rc = C.rr_isend(c.h, r.p, ptr, C.int(len(buf)), C.int(peer), C.int(tag))
	}
	err := c.enterLocked(r, rc, op)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return r, nil
}

// enterLocked ends the posting of r, whose MPI call returned rc (-1: MPI
// was finalized): on success r joins the engine's in-flight list, on
// failure its pin and C state are released. e.mu held.
func (c *mpiComm) enterLocked(r *request, rc C.int, op string) error {
	e := c.e
	var err error
	if rc == -1 {
		err = fmt.Errorf("%w: %s on group %q rank %d: MPI finalized", comm.ErrClosed, op, c.name, c.rank)
	} else if rc != C.MPI_SUCCESS {
		err = mpiError(rc, op, "MPI_"+op, c.name, c.rank)
	} else {
		r.idx = len(e.inflight)
		e.inflight = append(e.inflight, r)
		return nil
	}
	e.unpinLocked(r)
	C.rr_p2p_free(r.p)
	return err
}

// VectorIO implements comm.Vectored.
func (c *mpiComm) VectorIO() bool { return true }

// IsendParts implements comm.Vectored: one MPI_Isend of an hindexed
// datatype over the parts, no packing copy.
func (c *mpiComm) IsendParts(parts [][]byte, dest, tag int) (comm.Request, error) {
	return c.postParts("IsendParts", parts, dest, tag, false)
}

// IrecvParts implements comm.Vectored: one MPI_Irecv into the parts.
func (c *mpiComm) IrecvParts(parts [][]byte, src, tag int) (comm.Request, error) {
	return c.postParts("IrecvParts", parts, src, tag, true)
}

// postParts posts a vectored request: the parts' addresses and lengths go
// to C once (a datatype), each part is pinned until the request completes.
// Empty parts are skipped; none at all (nil included, as on every backend)
// is an empty message.
func (c *mpiComm) postParts(op string, parts [][]byte, peer, tag int, recv bool) (comm.Request, error) {
	if err := args.Check(c, op, peer, tag, recv); err != nil {
		return nil, err
	}
	total, n := 0, 0
	for _, p := range parts {
		if len(p) > 0 {
			total += len(p)
			n++
		}
	}
	if total > math.MaxInt32 || n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %s: %d bytes in %d parts exceed MPI's int count", comm.ErrBadArgument, op, total, n)
	}
	if n == 0 {
		return c.post(op, []byte{}, peer, tag, recv)
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("%w: %s on group %q rank %d", comm.ErrClosed, op, c.name, c.rank)
	}
	r := &request{c: c, recv: recv, peer: peer, tag: tag, n: total}
	r.p = C.rr_p2p_new()
	if r.p == nil {
		return nil, fmt.Errorf("mpi: %s: out of C memory", op)
	}
	addrs := (*C.MPI_Aint)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.MPI_Aint(0)))))
	lens := (*C.int)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(addrs))
	defer C.free(unsafe.Pointer(lens))
	av, lv := unsafe.Slice(addrs, n), unsafe.Slice(lens, n)
	e := c.e
	e.mu.Lock()
	r.pin = e.pinnerLocked()
	i := 0
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		r.pin.Pin(&p[0])
		av[i], lv[i] = C.MPI_Aint(uintptr(unsafe.Pointer(&p[0]))), C.int(len(p))
		i++
	}
	var rc C.int
	if e.finalized {
		rc = -1
	} else {
		var isRecv C.int
		if recv {
			isRecv = 1
		}
		rc = C.rr_ipost_v(c.h, r.p, addrs, lens, C.int(n), C.int(peer), C.int(tag), isRecv)
	}
	err := c.enterLocked(r, rc, op)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (c *mpiComm) Isend(buf []byte, dest, tag int) (comm.Request, error) {
	return c.post("Isend", buf, dest, tag, false)
}

func (c *mpiComm) Irecv(buf []byte, src, tag int) (comm.Request, error) {
	return c.post("Irecv", buf, src, tag, true)
}

// what is the request for a reader: "receive from rank 1 tag 2".
func (r *request) what() string {
	switch {
	case !r.recv:
		return fmt.Sprintf("send to rank %d tag %d", r.peer, r.tag)
	case r.peer == comm.AnySource:
		return fmt.Sprintf("receive from any rank tag %d", r.tag)
	}
	return fmt.Sprintf("receive from rank %d tag %d", r.peer, r.tag)
}

func (r *request) op() string {
	if r.recv {
		return "Irecv"
	}
	return "Isend"
}

// finishLocked records the outcome, releases the C state and the pin, and
// takes the request off the engine's in-flight list. e.mu held.
func (r *request) finishLocked(st comm.Status, err error) {
	r.done, r.st, r.err = true, st, err
	C.rr_p2p_free(r.p)
	r.p = nil
	r.c.e.unpinLocked(r)
	r.c.e.dropInflightLocked(r)
}

// statusLocked reads the completed request's status. e.mu held.
func (r *request) statusLocked() comm.Status {
	if !r.recv {
		return comm.Status{Source: r.c.rank, Tag: r.tag, Len: r.n}
	}
	return comm.Status{Source: int(C.rr_p2p_source(r.p)), Tag: int(C.rr_p2p_tag(r.p)), Len: int(r.p.count)}
}

func (r *request) Test() (comm.Status, bool, error) {
	e := r.c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.testLocked(false, 0)
}

// testLocked polls the request, spinning in C for up to budget ns (at
// least one test). e.mu held.
func (r *request) testLocked(service bool, budget C.int64_t) (comm.Status, bool, error) {
	if r.done {
		return r.st, true, r.err
	}
	e := r.c.e
	if e.finalized {
		return comm.Status{}, false, fmt.Errorf("%w: %s: MPI finalized", comm.ErrClosed, r.op())
	}
	if r.cancelling {
		r.pollCancelledLocked()
		return r.st, r.done, r.err
	}
	rc := C.rr_p2p_spin(r.p, budget, e.armYield())
	e.spun()
	if rc != C.MPI_SUCCESS {
		r.finishLocked(comm.Status{}, mpiError(rc, r.op(), "MPI_Test", r.c.name, r.c.rank))
	} else if r.p.flag != 0 {
		r.finishLocked(r.statusLocked(), nil)
	}
	if service {
		e.serviceLocked()
	}
	if !r.done {
		return comm.Status{}, false, nil
	}
	return r.st, true, r.err
}

func (r *request) Wait(ctx context.Context) (comm.Status, error) {
	e := r.c.e
	e.mu.Lock()
	st, ok, err := r.testLocked(false, spinBudgetNs)
	e.mu.Unlock()
	if ok || err != nil {
		return st, err
	}
	done := ctx.Done()
	waitStart := time.Now()
	for i := 0; ; i++ {
		e.mu.Lock()
		long := e.sleepy() || time.Since(waitStart) >= sleepAfter
		budget := spinBudgetNs
		if long {
			budget = 0
		}
		st, ok, err := r.testLocked(i%serviceEvery == serviceEvery-1, budget)
		e.mu.Unlock()
		if ok || err != nil {
			return st, err
		}
		if done != nil {
			select {
			case <-done:
				return comm.Status{}, fmt.Errorf("mpi: %s peer %d tag %d on group %q rank %d: %w",
					r.op(), r.peer, r.tag, r.c.name, r.c.rank, ctx.Err())
			default:
			}
		}
		if r.c.boundWaits && time.Since(waitStart) >= r.c.timeout {
			return comm.Status{}, &comm.WaitTimeoutError{Group: r.c.name, Self: r.c.rank, Op: r.what(), Bound: r.c.timeout, WorldRanks: slices.Clone(r.c.worlds)}
		}
		backoff(long)
	}
}

func (r *request) Cancel() error {
	e := r.c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if !r.recv {
		return fmt.Errorf("%w: Isend to %d tag %d on group %q: a send cannot be withdrawn", comm.ErrNotCancelled, r.peer, r.tag, r.c.name)
	}
	if r.done {
		if errors.Is(r.err, errCancelled) {
			return nil
		}
		return fmt.Errorf("%w: Irecv from %d tag %d on group %q already completed", comm.ErrNotCancelled, r.peer, r.tag, r.c.name)
	}
	if e.finalized {
		return fmt.Errorf("%w: Irecv: MPI finalized", comm.ErrClosed)
	}
	if !r.cancelling {
		if rc := C.rr_p2p_cancel(r.p); rc != C.MPI_SUCCESS {
			return mpiError(rc, "Cancel", "MPI_Cancel", r.c.name, r.c.rank)
		}
		r.cancelling = true
	}
	// A withdrawn receive completes at once; one that had matched
	// completes when its bytes have arrived. Poll for at most
	// cancelBound, releasing the engine between polls (the stall
	// inspector's responder needs it): a sender that is frozen or gone
	// never finishes, and MPI_Wait here hung a job whose CTX rank froze
	// mid-transfer.
	start := time.Now()
	for !r.pollCancelledLocked() {
		if time.Since(start) >= cancelBound {
			return fmt.Errorf("%w: Irecv from %d tag %d on group %q had matched and is still receiving after %v: its buffer stays in use",
				comm.ErrNotCancelled, r.peer, r.tag, r.c.name, cancelBound)
		}
		e.mu.Unlock()
		backoff(true)
		e.mu.Lock()
		if e.finalized && !r.done {
			return fmt.Errorf("%w: Irecv: MPI finalized", comm.ErrClosed)
		}
	}
	if errors.Is(r.err, errCancelled) {
		return nil
	}
	if r.err != nil {
		return r.err
	}
	return fmt.Errorf("%w: Irecv from %d tag %d on group %q had already matched", comm.ErrNotCancelled, r.peer, r.tag, r.c.name)
}

// pollCancelledLocked polls a cancelled receive once and reports whether
// it is done: withdrawn (its error wraps errCancelled) or completed as
// matched. e.mu held.
func (r *request) pollCancelledLocked() bool {
	if r.done {
		return true
	}
	rc := C.rr_p2p_cancel_poll(r.p)
	switch {
	case rc != C.MPI_SUCCESS:
		r.finishLocked(comm.Status{}, mpiError(rc, "Cancel", "MPI_Test", r.c.name, r.c.rank))
	case r.p.flag == 0:
		return false
	case r.p.cancelled != 0:
		r.finishLocked(comm.Status{}, fmt.Errorf("%w: Irecv from %d tag %d on group %q", errCancelled, r.peer, r.tag, r.c.name))
	default:
		r.finishLocked(r.statusLocked(), nil)
	}
	return true
}

// cancelBound is how long Cancel waits for a receive that had matched to
// finish arriving before it gives up and leaves the receive in flight.
const cancelBound = 200 * time.Millisecond

// Progress is what comm.PropsOf(c).Progress returns: it tests every incomplete
// point-to-point request in flight, in C, for up to budget (each test
// drives MPI's progress for all of them), and returns as soon as any of
// them completes, whichever it is: the caller's next Test or Wait reports
// it. False when none is in flight, or when, yielding being off
// (engine.sleepy), one round of tests completed none: the caller should
// pause.
func (c *mpiComm) Progress(budget time.Duration) bool {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.finalized {
		return false
	}
	reqs := e.anyBuf[:0]
	for _, r := range e.inflight {
		if !r.done && !r.cancelling {
			reqs = append(reqs, r)
		}
	}
	e.anyBuf = reqs
	if len(reqs) == 0 {
		return false
	}
	ps := e.anyPtrs(len(reqs))
	for i, r := range reqs {
		ps[i] = r.p
	}
	// While yielding is off (a busy process shares the cores), one round
	// of tests only, and false when none completed: the caller sleeps
	// between polls instead of spinning the core away from the peer whose
	// bytes it waits for.
	sleepy := e.sleepy()
	spin := C.int64_t(budget.Nanoseconds())
	if sleepy {
		spin = 0
	}
	var rc C.int
	i := int(C.rr_p2p_spin_any(C.uintptr_t(uintptr(unsafe.Pointer(&ps[0]))), C.int(len(reqs)), spin, e.armYield(), &rc))
	e.spun()
	if i >= 0 {
		r := reqs[i]
		if rc != C.MPI_SUCCESS {
			r.finishLocked(comm.Status{}, mpiError(rc, r.op(), "MPI_Test", r.c.name, r.c.rank))
		} else {
			r.finishLocked(r.statusLocked(), nil)
		}
	}
	e.serviceLocked()
	clear(reqs) // no references kept past the call
	return i >= 0 || !sleepy
}
