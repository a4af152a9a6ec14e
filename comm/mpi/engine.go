//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/internal/pause"
)

// engine owns this process's MPI library state. Every MPI call is made with
// mu held (the funnel: see doc.go), and each call is short because the
// binding only uses non-blocking operations and MPI_Test.
type engine struct {
	mu        sync.Mutex
	rec       *flight.Recorder
	worldRank int

	// Guarded by mu.
	live      map[*mpiComm]struct{} // communicators whose inspection channel is open
	orphans   []orphan              // abandoned collectives MPI has not completed yet
	sends     []*C.rr_p2p           // inspection messages in flight
	inflight  []*request            // point-to-point requests MPI has not completed
	pinners   []*runtime.Pinner     // unpinned Pinners to reuse (see pinnerLocked)
	reapNext  int                   // where the responder's next sweep of inflight starts
	nonce     int64
	finalized bool
	// returned is set as Finalize begins: this rank's program has
	// returned and enters nothing more (the stall inspector's answer says so).
	returned bool
	// Yielding (see rr_yield in cmpi.h): oversub when this node's ranks
	// outnumber its cores; yieldCell is the C cell a spin yields by
	// (armYield); a slow yield turns yielding off until yieldOffUntil.
	oversub   bool
	yieldCell *C.int
	// Progress's scratch: the requests it tests, and a C array of their
	// rr_p2p pointers (grown, never shrunk; C memory, so a call passes no
	// Go pointer to C).
	anyBuf        []*request
	anyPtr        **C.rr_p2p
	anyCap        int
	yieldArmed    bool
	yieldOffUntil time.Time

	stop chan struct{}
	done chan struct{}
}

// orphan is a collective abandoned when its context ended (or its bound
// passed). MPI cannot withdraw it, so its C state stays allocated until MPI
// completes it (which may be never: then it is leaked, deliberately).
type orphan struct {
	co *C.rr_coll // MPI's non-blocking collective state, or nil
	dx *C.rr_dx   // the direct collectives' state, or nil
	// pin keeps a typed collective's Go buffers pinned (and alive) until
	// MPI completes it (nil otherwise).
	pin *runtime.Pinner
}

// newEngine makes the engine of world rank worldRank; oversub says that
// the ranks on this node outnumber its cores (they then give the core
// away while they wait).
func newEngine(rec *flight.Recorder, worldRank int, oversub bool) *engine {
	return &engine{rec: rec, worldRank: worldRank, live: map[*mpiComm]struct{}{}, oversub: oversub,
		yieldCell: (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))}
}

// anyPtrs returns the C array of n request pointers Progress fills. e.mu
// held.
func (e *engine) anyPtrs(n int) []*C.rr_p2p {
	if n > e.anyCap {
		C.free(unsafe.Pointer(e.anyPtr))
		e.anyCap = max(n, 2*e.anyCap, 16)
		e.anyPtr = (**C.rr_p2p)(C.malloc(C.size_t(e.anyCap) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	}
	return unsafe.Slice(e.anyPtr, n)
}

// yieldPause is how long yielding stays off after a slow yield: an
// unrelated busy process shares the cores, and a yield would hand it a
// whole time slice; waits sleep between their polls instead.
const yieldPause = 100 * time.Millisecond

// armYield sets the yield cell for the next spin: yield between polls when
// ranks outnumber cores and no yield was slow lately. e.mu held.
func (e *engine) armYield() *C.int {
	e.yieldArmed = e.oversub && !time.Now().Before(e.yieldOffUntil)
	*e.yieldCell = 0
	if e.yieldArmed {
		*e.yieldCell = 1
	}
	return e.yieldCell
}

// spun is called after an armed spin: when a yield in it was slow, it
// turns yielding off for yieldPause. e.mu held.
func (e *engine) spun() {
	if e.yieldArmed && *e.yieldCell == 0 {
		e.yieldOffUntil = time.Now().Add(yieldPause)
	}
	e.yieldArmed = false
}

// sleepy reports whether a wait should sleep between its polls at once:
// ranks outnumber cores and yielding is off (a busy process shares the
// cores, so spinning would keep the core from the peers this rank waits
// for, and yielding would give it to that process for a slice). e.mu held.
func (e *engine) sleepy() bool { return e.oversub && time.Now().Before(e.yieldOffUntil) }

// Error is an MPI return code turned into a Go error, with the operation,
// group and rank it came from. It unwraps to comm.ErrTruncated when MPI
// reports a truncated message.
type Error struct {
	Op    string // the comm operation (AllreduceInt64, Isend, ...)
	Call  string // the MPI call that failed
	Group string
	Rank  int
	Code  int // the MPI return code
	Class int // its MPI error class
	Msg   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s on group %q rank %d: %s failed: %s (code %d)", e.Op, e.Group, e.Rank, e.Call, e.Msg, e.Code)
}

// Unwrap maps MPI error classes to the comm sentinels.
func (e *Error) Unwrap() error {
	if e.Class == int(C.MPI_ERR_TRUNCATE) {
		return comm.ErrTruncated
	}
	return nil
}

// mpiError builds an *Error for rc (not MPI_SUCCESS). It calls into MPI, so
// the caller holds mu or MPI is otherwise quiet; error paths may allocate.
func mpiError(rc C.int, op, call, group string, rank int) error {
	buf := (*C.char)(C.malloc(C.MPI_MAX_ERROR_STRING + 1))
	defer C.free(unsafe.Pointer(buf))
	var n, cls C.int
	C.rr_errstr(rc, buf, &n, &cls)
	return &Error{Op: op, Call: call, Group: group, Rank: rank, Code: int(rc), Class: int(cls), Msg: C.GoStringN(buf, n)}
}

// backoff is called between unsuccessful polls (each of which spun in C
// for up to spinBudget, yielding the core between its polls when this
// node's ranks outnumber its cores: rr_yield): it lets other goroutines
// run, and once a wait is long (sleepAfter), or yielding was found to hand
// the core to an unrelated busy process (engine.sleepy), it sleeps
// briefly, so a waiting rank stops taking a core from the processes that
// have work while still answering the stall inspector.
func backoff(long bool) {
	if long {
		// A peer is busy elsewhere, or the cores are shared. Sleep
		// briefly so this rank stops taking a core from the processes
		// that have work (its peers, and mpirun itself, which forwards
		// rank 0's output: a pty it cannot drain blocks rank 0's
		// report); a sleeper is woken in time where a yielder waits
		// for the slice.
		pause.Poll(50 * time.Microsecond)
		return
	}
	runtime.Gosched()
}

// sleepAfter is how long a wait spins before it starts sleeping between
// polls (then each poll is a single test). Transfers and collectives that
// take longer than this progress more slowly while waiting: 20 ms halved
// the bandwidth of a 64 MiB transfer at np=4 oversubscribed (~35 ms).
const sleepAfter = 100 * time.Millisecond

// spinBudget is how long one poll spins in C (MPI_Test or MPI_Testsome in
// a loop, under the MPI mutex) before it returns to Go to check the
// context, the bound and the clock: long enough that returning costs well
// under 1% of a large transfer's progress, short enough that other
// goroutines' MPI calls and the stall inspector wait little for the mutex.
const spinBudget = 50 * time.Microsecond

const spinBudgetNs = C.int64_t(spinBudget)

// serviceEvery is how often (in polls) a waiting rank also answers
// inspection requests (about every millisecond while spinning).
const serviceEvery = 16

// serviceLocked answers inspection requests that have arrived on any live
// communicator, and reaps finished inspection sends and orphans. mu held.
func (e *engine) serviceLocked() {
	if e.finalized {
		return
	}
	for c := range e.live {
		in := c.insp
		if in == nil {
			continue
		}
		if C.rr_insp_test(in) != C.MPI_SUCCESS || in.flag == 0 {
			continue
		}
		src := int(C.rr_insp_source(in))
		nonce := int64(in.nonce)
		C.rr_insp_post(in)
		if nonce == returnedNonce {
			c.gone++ // a notice, not a question: nothing to answer
			continue
		}
		e.replyLocked(in, src, reply{nonce: nonce, entered: c.entered, returned: e.returned})
	}
	e.reapLocked()
}

// returnedNonce is the word of a "returned" notice on an inspection
// channel: the sender's program has returned and it enters nothing more
// (inspection nonces count up from 1).
const returnedNonce = -1

// noticeReturnedLocked tells every peer on every live communicator that
// this rank's program returned (World.Finalize, before it waits for its
// peers): a peer waiting in a collective this rank never entered fails at
// once, naming it, instead of at its bound. Open MPI cannot tell it: the
// process is alive, in Finalize. Finalize's own communicator (skip) is
// left out: its reduction is the one collective every rank enters after
// its notice. mu held.
func (e *engine) noticeReturnedLocked(skip *mpiComm) {
	for c := range e.live {
		if c.insp == nil || c == skip {
			continue
		}
		for p := range c.size {
			if p == c.rank {
				continue
			}
			req := C.rr_p2p_new()
			req.word = C.int64_t(returnedNonce)
			if C.rr_insp_request(c.insp, req, C.int(p)) != C.MPI_SUCCESS {
				C.rr_p2p_free(req)
				continue
			}
			e.sends = append(e.sends, req)
		}
	}
}

// replyLocked sends rp, with this rank's flight records, to src.
func (e *engine) replyLocked(in *C.rr_insp, src int, rp reply) {
	rp.recs, rp.pending = e.rec.Snapshot(), e.rec.Pending()
	msg := encodeReply(rp)
	p := C.rr_p2p_new()
	p.owned = (*C.char)(C.CBytes(msg))
	if C.rr_insp_reply(in, p, C.int(len(msg)), C.int(src)) != C.MPI_SUCCESS {
		C.rr_p2p_free(p)
		return
	}
	e.sends = append(e.sends, p)
}

func (e *engine) reapLocked() {
	if len(e.sends) > 0 {
		kept := e.sends[:0]
		for _, p := range e.sends {
			if C.rr_p2p_test(p) != C.MPI_SUCCESS || p.flag != 0 {
				C.rr_p2p_free(p)
				continue
			}
			kept = append(kept, p)
		}
		clear(e.sends[len(kept):])
		e.sends = kept
	}
	if len(e.orphans) > 0 {
		kept := e.orphans[:0]
		for _, o := range e.orphans {
			// A typed collective on the direct path posts its requests on
			// dx while its buffers are the pinned Go ones and, for a direct
			// Allreduce, co's scratch: co, dx and the pins go together,
			// once neither has an operation MPI may still complete.
			coDone := o.co == nil || C.rr_test(o.co) == C.MPI_SUCCESS && o.co.flag != 0
			dxDone := o.dx == nil || C.rr_dx_done(o.dx) != 0
			if !coDone || !dxDone {
				kept = append(kept, o)
				continue
			}
			if o.co != nil {
				C.rr_coll_free(o.co)
			}
			if o.dx != nil {
				C.rr_dx_free(o.dx)
			}
			if o.pin != nil {
				o.pin.Unpin()
			}
		}
		clear(e.orphans[len(kept):])
		e.orphans = kept
	}
}

// pinnerLocked returns an unpinned Pinner. Reused Pinners keep their
// backing store; the runtime's own cache holds one per P, so with two
// requests in flight every other Pin would allocate. e.mu held.
func (e *engine) pinnerLocked() *runtime.Pinner {
	if n := len(e.pinners); n > 0 {
		p := e.pinners[n-1]
		e.pinners[n-1] = nil
		e.pinners = e.pinners[:n-1]
		return p
	}
	return new(runtime.Pinner)
}

// unpinLocked unpins r's buffer and keeps its Pinner for reuse. e.mu held.
func (e *engine) unpinLocked(r *request) {
	if r.pin == nil {
		return
	}
	r.pin.Unpin()
	e.pinners = append(e.pinners, r.pin)
	r.pin = nil
}

// dropInflightLocked takes r (done) off the in-flight list. e.mu held.
func (e *engine) dropInflightLocked(r *request) {
	last := len(e.inflight) - 1
	moved := e.inflight[last]
	e.inflight[r.idx] = moved
	moved.idx = r.idx
	e.inflight[last] = nil
	e.inflight = e.inflight[:last]
	r.idx = -1
}

// reapBatch bounds how many in-flight requests one responder tick tests.
const reapBatch = 32

// reapRequestsLocked tests up to reapBatch in-flight point-to-point
// requests, round robin, and finishes those MPI has completed. This is what
// releases a request its caller dropped before completion (an error path
// that stops waiting): the engine's list kept its buffer pinned and alive
// until now. A request that never completes (a receive nothing matches)
// stays listed, its buffer held, until MPI_Finalize, as abandoned
// collectives do. Requests a caller still holds may be completed here too:
// their next Test or Wait reports the outcome. e.mu held.
func (e *engine) reapRequestsLocked() {
	if e.finalized {
		return
	}
	for range min(reapBatch, len(e.inflight)) {
		if e.reapNext >= len(e.inflight) {
			e.reapNext = 0
		}
		r := e.inflight[e.reapNext]
		r.testLocked(false, 0) // when done, r leaves the list and another takes its slot
		if !r.done {
			e.reapNext++
		}
	}
}

// responder runs until stop: it takes mu briefly every few milliseconds so
// that a rank busy with rank-local work (or blocked outside MPI) still
// answers inspection requests and progresses MPI.
func (e *engine) responder(every time.Duration) {
	defer close(e.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.mu.Lock()
			e.serviceLocked()
			e.reapRequestsLocked()
			e.mu.Unlock()
		}
	}
}
