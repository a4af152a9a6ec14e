//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// responderEvery is how often the background responder services MPI.
const responderEvery = 5 * time.Millisecond

// Available reports whether this binary was built with the MPI backend.
func Available() bool { return true }

// World is this process's MPI world: MPI is initialised by Init and
// finalised by Finalize, once per process.
type World struct {
	e     *engine
	world *mpiComm
	// fin carries Finalize's exit-code reduction: a communicator of its
	// own, so that a rank which returns while its peers still wait in a
	// collective on the world never pairs its reduction with theirs (they
	// time out naming it as returned, instead of a desync it never made).
	fin       *mpiComm
	c         comm.Comm
	rec       *flight.Recorder
	localRank int
	cfg       Config

	finOnce sync.Once
	finCode int
}

var initMu sync.Mutex // MPI can be initialised once per process

// Init initialises MPI (MPI_Init_thread) and returns the world. Call it
// once, from the goroutine that will call Finalize (it locks that goroutine
// to its OS thread so MPI_Finalize runs on the thread that initialised MPI).
func Init(cfg Config) (*World, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	initMu.Lock()
	defer initMu.Unlock()
	level := C.int(C.MPI_THREAD_SERIALIZED)
	if cfg.ThreadLevel == Multiple {
		level = C.MPI_THREAD_MULTIPLE
	}
	// The binding gives the core away itself, and only while that helps
	// (rr_yield in cmpi.h): Open MPI's own yield in every progress call
	// hands a whole time slice to any busy process sharing the cores. A
	// value the user set is kept.
	_, userYield := os.LookupEnv("OMPI_MCA_mpi_yield_when_idle")
	if !userYield {
		os.Setenv("OMPI_MCA_mpi_yield_when_idle", "0")
	}
	runtime.LockOSThread()
	var provided C.int
	rc := C.rr_init(level, &provided)
	if rc == -1 {
		runtime.UnlockOSThread()
		return nil, errors.New("mpi: Init: MPI is already initialised in this process (Init may be called once)")
	}
	if rc != C.MPI_SUCCESS {
		runtime.UnlockOSThread()
		return nil, mpiError(rc, "Init", "MPI_Init_thread", "world", -1)
	}
	fail := func(err error) (*World, error) {
		C.MPI_Finalize()
		runtime.UnlockOSThread()
		return nil, err
	}
	if provided < level {
		return fail(fmt.Errorf("mpi: Init: MPI granted thread level %d, below the %v level asked for", int(provided), cfg.ThreadLevel))
	}
	var wrank, wsize, lrank, lsize C.int
	if rc := C.rr_setup(C.rr_world(), &wrank, &wsize); rc != C.MPI_SUCCESS {
		return fail(mpiError(rc, "Init", "MPI_Comm_rank/size", "world", -1))
	}
	if cfg.Size > 0 && int(wsize) != cfg.Size {
		return fail(&SizeError{Want: cfg.Size, Got: int(wsize)})
	}
	if rc := C.rr_local_rank(&lrank, &lsize); rc != C.MPI_SUCCESS {
		return fail(mpiError(rc, "Init", "MPI_Comm_split_type", "world", int(wrank)))
	}
	setProcs(cfg.GOMAXPROCS, int(lsize))
	rec := flight.NewRecorder(cfg.RecorderDepth)
	// The binding yields itself where ranks outnumber cores, unless the
	// user chose Open MPI's behaviour (it then yields, or not, itself).
	e := newEngine(rec, int(wrank), !userYield && int(lsize) > int(C.rr_node_cpus()))
	var insp C.MPI_Comm
	if rc := C.rr_dup(C.rr_world(), &insp); rc != C.MPI_SUCCESS {
		return fail(mpiError(rc, "Init", "MPI_Comm_dup", "world", int(wrank)))
	}
	e.mu.Lock()
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = comm.DefaultCollectiveTimeout
	}
	wc, err := newComm(e, C.rr_world(), insp, "world", true, timeout, false)
	e.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	wc.boundWaits = cfg.BoundWaits
	var fh, fi C.MPI_Comm
	if rc := C.rr_dup(C.rr_world(), &fh); rc != C.MPI_SUCCESS {
		return fail(mpiError(rc, "Init", "MPI_Comm_dup", "finalize", int(wrank)))
	}
	if rc := C.rr_dup(C.rr_world(), &fi); rc != C.MPI_SUCCESS {
		return fail(mpiError(rc, "Init", "MPI_Comm_dup", "finalize", int(wrank)))
	}
	e.mu.Lock()
	fc, err := newComm(e, fh, fi, "finalize", false, timeout, false)
	e.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	w := &World{e: e, world: wc, fin: fc, c: wc, rec: rec, localRank: int(lrank), cfg: cfg}
	if cfg.Checked {
		w.c = comm.NewChecked(wc, comm.CheckConfig{Timeout: cfg.Timeout, Recorder: rec, AnySite: cfg.AnySite})
	}
	e.stop = make(chan struct{})
	e.done = make(chan struct{})
	go e.responder(responderEvery)
	return w, nil
}

// Comm returns the world communicator (checked when Config.Checked).
func (w *World) Comm() comm.Comm { return w.c }

// Raw returns the unchecked world communicator.
func (w *World) Raw() comm.Comm { return w.world }

// Rank is this process's rank in MPI_COMM_WORLD.
func (w *World) Rank() int { return w.world.rank }

// Size is the number of ranks in MPI_COMM_WORLD.
func (w *World) Size() int { return w.world.size }

// LocalRank is this process's rank among the ranks on its node.
func (w *World) LocalRank() int { return w.localRank }

// RequireSize returns a *SizeError naming both sizes unless the world has
// exactly want ranks (for commands that only work at one size).
func (w *World) RequireSize(want int) error {
	if w.world.size != want {
		return &SizeError{Want: want, Got: w.world.size}
	}
	return nil
}

// Recorder is this rank's flight recorder (the one checked mode records
// into and the stall inspector reports).
func (w *World) Recorder() *flight.Recorder { return w.rec }

// Finalize reduces exitCode across every rank with MPI max, finalises MPI
// and returns the reduced code, so every rank exits alike:
//
//	os.Exit(w.Finalize(code))
//
// When the reduction cannot complete (the world is broken, or a peer does
// not arrive within Config.FinalizeTimeout) the job is aborted with a
// non-zero code instead. Calling Finalize again returns the first result.
//
// The reduction runs on a communicator of its own, duplicated at Init: a
// rank that calls Finalize while its peers still wait in a collective on
// the world never pairs with them (no false desync), and from then on it
// answers the stall inspector as returned, so their collective times out
// naming it so.
func (w *World) Finalize(exitCode int) int {
	w.finOnce.Do(func() { w.finCode = w.finalize(exitCode) })
	return w.finCode
}

func (w *World) finalize(exitCode int) int {
	d := w.cfg.FinalizeTimeout
	if d <= 0 {
		d = time.Minute
	}
	// The bound below ends a reduction a peer never joins, naming it; the
	// context is only a backstop behind it (the stall inspector's answers
	// come after the bound).
	ctx, cancel := context.WithTimeout(context.Background(), d+inspectMax+time.Second)
	defer cancel()
	var v [1]int64
	v[0] = int64(exitCode)
	// A world collective still in flight on another goroutine ends first
	// (completed, or at its bound); a world that is broken (a collective
	// timed out or desynced, and its error was dropped) ends the job, as
	// it did when the reduction ran on the world itself.
	w.world.collMu.Lock()
	broken := w.world.broken
	w.world.collMu.Unlock()
	if broken != nil {
		w.Abort(max(exitCode, 1), fmt.Errorf("mpi: Finalize: group %q is broken: %w", w.world.name, broken))
	}
	// From here this rank enters nothing more on any communicator: a peer
	// that times out waiting for it is told so by the stall inspector.
	w.e.mu.Lock()
	w.e.returned = true
	w.e.noticeReturnedLocked(w.fin)
	w.e.mu.Unlock()
	// The reduction waits for the slowest rank to finish its work: it is
	// bounded by FinalizeTimeout, not by the collective timeout.
	w.fin.collMu.Lock()
	w.fin.timeout = d
	w.fin.collMu.Unlock()
	if err := w.fin.AllreduceInt64(ctx, comm.Max, v[:], v[:]); err != nil {
		w.Abort(max(exitCode, 1), fmt.Errorf("mpi: Finalize could not agree on the exit code: %w", err))
	}
	close(w.e.stop)
	<-w.e.done
	w.fin.Close()
	w.world.Close()
	w.e.mu.Lock()
	w.e.finalized = true
	C.MPI_Finalize()
	w.e.mu.Unlock()
	runtime.UnlockOSThread()
	return int(v[0])
}

// Abort writes reason, with this rank named, to stderr and ends the whole
// job with MPI_Abort(MPI_COMM_WORLD, code). It does not return.
func (w *World) Abort(code int, reason error) {
	w.world.Abort(code, reason)
}

// setProcs sets GOMAXPROCS for a rank: n when n > 0; when n == 0 (unless
// the GOMAXPROCS environment variable says otherwise) the cores this
// process may run on divided among the ranks of its node, but at least 2.
// mpirun binds each rank to one core when np <= cores (runtime.NumCPU is
// then 1); unbound ranks each see every core of the node, and a Go runtime
// per rank that size runs more threads than the node has cores
// (MPI-NOTES.md). The floor of 2 is measured: with one P, a cgo call that
// outlasts 20 us (a poll in which Open MPI yields the core on an
// oversubscribed node) has its P retaken by sysmon, which then polls every
// 20 us: 14% of a rank's samples at np=4 on 2 cores (1.8% with 2 Ps), and
// point to point at 0.6-0.75x C instead of 0.87-1.07x. A second P is idle
// unless two goroutines of the rank run at once.
func setProcs(n, ranksOnNode int) {
	switch {
	case n > 0:
		runtime.GOMAXPROCS(n)
	case n == 0 && os.Getenv("GOMAXPROCS") == "":
		runtime.GOMAXPROCS(max(2, runtime.NumCPU()/max(1, ranksOnNode)))
	}
}
