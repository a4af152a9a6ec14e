//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// mpiComm is this rank's handle on an MPI communicator.
type mpiComm struct {
	e     *engine
	h     C.MPI_Comm
	rank  int
	size  int
	name  string
	world bool // MPI_COMM_WORLD: never freed

	// timeout bounds each collective (comm.PropsOf(c).Timeout), in every mode, and
	// with boundWaits every point-to-point Wait (Config.BoundWaits).
	timeout    time.Duration
	boundWaits bool
	// worlds is the world rank of each rank of the group.
	worlds []int

	// Guarded by e.mu.
	insp *C.rr_insp // the inspection channel (a duplicate of h)
	// entered counts the collectives this rank has entered here (the Seq
	// of the one in progress); the stall inspector's answer carries it.
	// Counted where the collective is posted, under e.mu already: no cost.
	entered uint64
	// gone counts the "returned" notices received here (returnedNonce): a
	// peer whose program returned says so before it finalizes, and a
	// collective waiting here asks at once whether it entered this one.
	gone int

	// collMu serialises this communicator's collectives and guards the
	// fields below it.
	collMu sync.Mutex
	co     *C.rr_coll // MPI's non-blocking collectives; nil once orphaned or closed
	dx     *C.rr_dx   // the direct collectives (groups up to directMax); nil otherwise, or once orphaned or closed
	direct bool       // the group's collectives are direct (see coll.go)
	dxLost bool       // a direct collective was orphaned: keep the control duplicate it may complete on
	native bool       // never direct, nor are its children (tests of MPI's collectives)
	splits int
	broken error
	// typedPin pins the caller's buffers of the typed collective in flight
	// (Collective); orphaned with it if this rank gives up first.
	typedPin *runtime.Pinner

	closed atomic.Bool
}

// The optional capabilities comm looks for (comm/capability.go), by
// their methods: a method of this backend that drifts fails the build;
// one comm asks for by another signature fails comm's
// TestBackendCapabilities (local and sim; MPI's: TestMPICapabilities).
var (
	_ comm.Comm = (*mpiComm)(nil)
	_ interface {
		InspectPeers(context.Context) []comm.PeerRecords
	} = (*mpiComm)(nil)
	_ interface{ Abort(code int, reason error) }     = (*mpiComm)(nil)
	_ interface{ CollectiveTimeout() time.Duration } = (*mpiComm)(nil)
	_ interface{ WorldRanks() []int }                = (*mpiComm)(nil)
)

// newComm wraps h (and its inspection duplicate ih) and registers it with
// the responder; its collectives are bounded by timeout. e.mu held.
func newComm(e *engine, h, ih C.MPI_Comm, name string, world bool, timeout time.Duration, native bool) (*mpiComm, error) {
	var rank, size C.int
	if rc := C.rr_setup(h, &rank, &size); rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "setup", "MPI_Comm_rank/size", name, -1)
	}
	c := &mpiComm{e: e, h: h, rank: int(rank), size: int(size), name: name, world: world, timeout: timeout, native: native}
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
	if c.size <= directMax && !native {
		// The direct collectives share the inspection duplicate (their own
		// tags): no further MPI_Comm_dup per communicator.
		c.dx = C.rr_dx_new(ih, rank, size)
		if c.dx == nil {
			return nil, fmt.Errorf("mpi: group %q: out of C memory", name)
		}
		c.direct = true
	}
	if rc := C.rr_insp_post(c.insp); rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "setup", "MPI_Irecv(inspect)", name, c.rank)
	}
	e.live[c] = struct{}{}
	return c, nil
}

// WorldRanks is what comm.PropsOf(c).WorldRanks reads.
func (c *mpiComm) WorldRanks() []int { return c.worlds }

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
	if err := c.barrierLocked(ctx, flight.KindSplit, "Split"); err != nil {
		return nil, err
	}
	h := c.h
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
	nc, err := newComm(e, child, insp, name, false, c.timeout, c.native)
	if err != nil {
		c.breakWith(err)
		return nil, err
	}
	nc.boundWaits = c.boundWaits
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
		keep := C.int(0)
		if c.dxLost {
			keep = 1
		}
		if rc := C.rr_insp_close(c.insp, keep); rc != C.MPI_SUCCESS {
			err = mpiError(rc, "Close", "MPI_Comm_free(inspect)", c.name, c.rank)
		}
		c.insp = nil
	}
	if c.co != nil {
		C.rr_coll_free(c.co)
		c.co = nil
	}
	if c.dx != nil {
		C.rr_dx_free(c.dx)
		c.dx = nil
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
