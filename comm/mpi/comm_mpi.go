//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
)

// mpiComm is this rank's handle on an MPI communicator.
type mpiComm struct {
	e     *engine
	h     C.MPI_Comm
	rank  int
	size  int
	name  string
	world bool // MPI_COMM_WORLD: never freed

	// timeout bounds each collective (comm.Bounded), in every mode.
	timeout time.Duration
	// worlds is the world rank of each rank of the group.
	worlds []int

	// Guarded by e.mu.
	insp *C.rr_insp // the inspection channel (a duplicate of h)
	// entered counts the collectives this rank has entered here (the Seq
	// of the one in progress); the stall inspector's answer carries it.
	// Counted where the collective is posted, under e.mu already: no cost.
	entered uint64

	// collMu serialises this communicator's collectives and guards the
	// fields below it.
	collMu sync.Mutex
	co     *C.rr_coll // nil once orphaned or closed
	splits int
	broken error

	closed atomic.Bool
}

var (
	_ comm.Comm      = (*mpiComm)(nil)
	_ comm.Inspector = (*mpiComm)(nil)
	_ comm.Aborter   = (*mpiComm)(nil)
	_ comm.Bounded   = (*mpiComm)(nil)
)

// newComm wraps h (and its inspection duplicate ih) and registers it with
// the responder; its collectives are bounded by timeout. e.mu held.
func newComm(e *engine, h, ih C.MPI_Comm, name string, world bool, timeout time.Duration) (*mpiComm, error) {
	var rank, size C.int
	if rc := C.rr_setup(h, &rank, &size); rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "setup", "MPI_Comm_rank/size", name, -1)
	}
	c := &mpiComm{e: e, h: h, rank: int(rank), size: int(size), name: name, world: world, timeout: timeout}
	worlds := make([]C.int, c.size)
	if rc := C.rr_world_ranks(h, size, &worlds[0]); rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "setup", "MPI_Group_translate_ranks", name, c.rank)
	}
	c.worlds = make([]int, c.size)
	for i, w := range worlds {
		c.worlds[i] = int(w)
	}
	c.co = C.rr_coll_new()
	c.insp = C.rr_insp_new(ih)
	if c.co == nil || c.insp == nil {
		return nil, fmt.Errorf("mpi: group %q: out of C memory", name)
	}
	if rc := C.rr_insp_post(c.insp); rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "setup", "MPI_Irecv(inspect)", name, c.rank)
	}
	e.live[c] = struct{}{}
	return c, nil
}

func (c *mpiComm) Rank() int    { return c.rank }
func (c *mpiComm) Size() int    { return c.size }
func (c *mpiComm) Name() string { return c.name }

// CollectiveTimeout is the bound of every collective on c (Config.Timeout):
// past it the collective returns a *comm.TimeoutError and c is broken.
func (c *mpiComm) CollectiveTimeout() time.Duration { return c.timeout }

// usableLocked fails fast on a closed or broken communicator. collMu held.
func (c *mpiComm) usableLocked(op string) error {
	if c.closed.Load() {
		return fmt.Errorf("%w: %s on group %q rank %d", comm.ErrClosed, op, c.name, c.rank)
	}
	if c.broken != nil {
		return fmt.Errorf("%w: %s on group %q rank %d: %w", comm.ErrBroken, op, c.name, c.rank, c.broken)
	}
	return nil
}

// breakWith marks the communicator broken. collMu held.
func (c *mpiComm) breakWith(err error) {
	if c.broken == nil {
		c.broken = err
	}
}

// abandon gives up the collective in flight: its C state goes to the
// engine's orphans (MPI still owns the buffers) and the group is broken.
// collMu held.
func (c *mpiComm) abandon(op string, cause error) error {
	return c.orphan(fmt.Errorf("mpi: %s on group %q rank %d abandoned, group broken: %w", op, c.name, c.rank, cause))
}

// orphan hands the collective in flight to the engine and breaks c with
// err, which it returns. collMu held.
func (c *mpiComm) orphan(err error) error {
	c.e.mu.Lock()
	c.e.orphans = append(c.e.orphans, orphan{co: c.co})
	c.e.mu.Unlock()
	c.co = nil
	c.breakWith(err)
	return err
}

// wait is one collective's waiting state, shared by its MPI operations
// (AllgatherInt64s and Bcast make two), so that the bound covers them all.
type wait struct {
	kind  comm.Kind
	start time.Time // when the first poll came back empty (zero until then)
}

// run posts one MPI operation of a collective with post (called with e.mu
// held) and waits for it. enter says the collective starts with it (it is
// then counted). collMu held.
func (c *mpiComm) run(ctx context.Context, w *wait, enter bool, op, call string, post func() C.int) error {
	c.e.mu.Lock()
	if c.e.finalized {
		c.e.mu.Unlock()
		return fmt.Errorf("%w: %s on group %q rank %d: MPI finalized", comm.ErrClosed, op, c.name, c.rank)
	}
	if enter {
		c.entered++
	}
	rc := post()
	if rc != C.MPI_SUCCESS {
		err := mpiError(rc, op, call, c.name, c.rank)
		c.e.mu.Unlock()
		c.breakWith(err)
		return err
	}
	// A first burst of polls in the same lock hold: small collectives
	// usually complete here.
	rc = C.rr_test_spin(c.co, spinPolls)
	c.e.mu.Unlock()
	if rc == C.MPI_SUCCESS && c.co.flag != 0 {
		return nil
	}
	return c.e.waitColl(ctx, c, w, op)
}

func (c *mpiComm) reserve(op string, ns, nr, m, b int) error {
	if C.rr_reserve(c.co, C.long(ns), C.long(nr), C.int(m), C.long(b)) != 0 {
		return fmt.Errorf("mpi: %s on group %q rank %d: cannot allocate scratch buffers", op, c.name, c.rank)
	}
	return nil
}

func int64s(p *C.int64_t, n int) []int64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(p)), n)
}

func (c *mpiComm) Barrier(ctx context.Context) error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("Barrier"); err != nil {
		return err
	}
	co, h := c.co, c.h
	w := wait{kind: comm.KindBarrier}
	return c.run(ctx, &w, true, "Barrier", "MPI_Ibarrier", func() C.int { return C.rr_ibarrier(h, co) })
}

func (c *mpiComm) AllreduceInt64(ctx context.Context, op comm.ReduceOp, in, out []int64) error {
	if !op.Valid() {
		return fmt.Errorf("%w: AllreduceInt64: unknown op %v", comm.ErrBadArgument, op)
	}
	if len(in) != len(out) {
		return fmt.Errorf("%w: AllreduceInt64: len(in)=%d != len(out)=%d", comm.ErrBadArgument, len(in), len(out))
	}
	n := len(in)
	if n > math.MaxInt32 {
		return fmt.Errorf("%w: AllreduceInt64: %d values exceed MPI's int count", comm.ErrBadArgument, n)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("AllreduceInt64"); err != nil {
		return err
	}
	if err := c.reserve("AllreduceInt64", n, n, 0, 0); err != nil {
		return err
	}
	co, h := c.co, c.h
	copy(int64s(co.sbuf, n), in)
	w := wait{kind: comm.KindAllreduce}
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
	if n > math.MaxInt32 {
		return fmt.Errorf("%w: AllgatherInt64s: %d values exceed MPI's int count", comm.ErrBadArgument, n)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("AllgatherInt64s"); err != nil {
		return err
	}
	if err := c.reserve("AllgatherInt64s", n, 0, c.size, 0); err != nil {
		return err
	}
	co, h := c.co, c.h
	co.mycount = C.int(n)
	copy(int64s(co.sbuf, n), in)
	w := wait{kind: comm.KindAllgather}
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

func (c *mpiComm) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("%w: Bcast: root %d outside 0..%d", comm.ErrBadArgument, root, c.size-1)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("Bcast"); err != nil {
		return nil, err
	}
	co, h := c.co, c.h
	if c.rank == root {
		co.len = C.int64_t(len(data))
	}
	w := wait{kind: comm.KindBcast}
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

func (c *mpiComm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < 0 || color > math.MaxInt32 {
		return nil, fmt.Errorf("%w: Split: color %d outside 0..%d", comm.ErrBadArgument, color, math.MaxInt32)
	}
	if key < math.MinInt32 || key > math.MaxInt32 {
		return nil, fmt.Errorf("%w: Split: key %d does not fit MPI's int", comm.ErrBadArgument, key)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	if err := c.usableLocked("Split"); err != nil {
		return nil, err
	}
	// MPI_Comm_split has no non-blocking form. A barrier first (which does
	// honour ctx) brings every member to the split, so the blocking calls
	// below return promptly instead of holding the MPI lock indefinitely.
	co, h := c.co, c.h
	w := wait{kind: comm.KindSplit}
	if err := c.run(ctx, &w, true, "Split", "MPI_Ibarrier", func() C.int { return C.rr_ibarrier(h, co) }); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s/s%dc%d", c.name, c.splits, color)
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var child, insp C.MPI_Comm
	if rc := C.rr_split(h, C.int(color), C.int(key), &child, &insp); rc != C.MPI_SUCCESS {
		err := mpiError(rc, "Split", "MPI_Comm_split", c.name, c.rank)
		c.breakWith(err)
		return nil, err
	}
	nc, err := newComm(e, child, insp, name, false, c.timeout)
	if err != nil {
		c.breakWith(err)
		return nil, err
	}
	c.splits++
	return nc, nil
}

// Close frees the communicator (MPI_Comm_free, except for the world). A
// collective still waiting on another goroutine returns ErrClosed.
func (c *mpiComm) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.live, c)
	if e.finalized {
		return nil
	}
	var err error
	if c.insp != nil {
		if rc := C.rr_insp_close(c.insp); rc != C.MPI_SUCCESS {
			err = mpiError(rc, "Close", "MPI_Comm_free(inspect)", c.name, c.rank)
		}
		c.insp = nil
	}
	if c.co != nil {
		C.rr_coll_free(c.co)
		c.co = nil
	}
	if !c.world {
		if rc := C.rr_comm_free(&c.h); rc != C.MPI_SUCCESS && err == nil {
			err = mpiError(rc, "Close", "MPI_Comm_free", c.name, c.rank)
		}
	}
	return err
}

// Abort ends the whole MPI job (MPI_Abort on this communicator) after
// writing reason, with this rank named, to stderr. It does not return.
func (c *mpiComm) Abort(code int, reason error) {
	fmt.Fprintf(os.Stderr, "rankrun: rank %d (world rank %d) aborts the MPI job from group %q with code %d: %v\n",
		c.rank, c.e.worldRank, c.name, code, reason)
	// Take the MPI lock when it comes free soon; abort regardless after a
	// second (another goroutine may be stuck in a blocking MPI call).
	deadline := time.Now().Add(time.Second)
	for !c.e.mu.TryLock() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	C.rr_abort(c.h, C.int(code))
	os.Exit(code) // not reached: MPI_Abort does not return
}
