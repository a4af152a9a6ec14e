//go:build mpi

package mpi

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// gcCycle runs a garbage collection and waits until the finalizers it
// queued have run: a sentinel's finalizer, queued by the same cycle, runs
// after them (one goroutine runs finalizers in queue order). Pinner's leak
// check is such a finalizer: a dropped request still pinning its buffer
// panics the process there ("runtime.Pinner: found leaking pinned pointer").
func gcCycle(t *testing.T) {
	t.Helper()
	ran := make(chan struct{})
	func() {
		s := new([16]byte)
		runtime.SetFinalizer(s, func(*[16]byte) { close(ran) })
	}()
	runtime.GC()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel's finalizer did not run within 10 s of runtime.GC")
	}
}

// TestDroppedRequestsSurviveGC: error paths drop Isend/Irecv
// requests that MPI has not completed. The request must keep its buffer
// alive and pinned for MPI without its caller: garbage collections that
// find the dropped request must not panic, and once MPI completes the
// request later, the engine reaps it.
func TestDroppedRequestsSurviveGC(t *testing.T) {
	w := testWorld
	c := w.Raw()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const recvTag, sendTag = 31, 32
	const size = 1 << 20 // above every BTL's eager limit: the send waits for its receive
	next, prev := (w.Rank()+1)%w.Size(), (w.Rank()+w.Size()-1)%w.Size()
	before := w.e.inflightCount()
	func() {
		// A receive nobody has sent to yet, and a send nobody receives yet,
		// both dropped at once (as an error path does).
		if _, err := c.Irecv(make([]byte, 64), prev, recvTag); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Isend(make([]byte, size), next, sendTag); err != nil {
			t.Fatal(err)
		}
	}()
	for range 4 {
		gcCycle(t) // the old binding panicked here
	}
	if got := w.e.inflightCount(); got < before+2 {
		t.Errorf("engine holds %d in-flight requests after dropping 2 (had %d): a dropped request was let go before MPI completed it", got, before)
	}
	// Every rank has checked before any completes its peer's requests.
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// Complete both from the other side: the engine must notice and let go.
	rq, err := c.Irecv(make([]byte, size), prev, sendTag)
	if err != nil {
		t.Fatal(err)
	}
	sq, err := c.Isend([]byte("late"), next, recvTag)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for w.e.inflightCount() > before {
		if ctx.Err() != nil {
			t.Fatalf("engine still holds %d in-flight requests (%d before): the dropped requests completed but were never reaped", w.e.inflightCount(), before)
		}
		time.Sleep(5 * time.Millisecond) // the responder reaps every few ms
	}
	gcCycle(t)
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// inflightCount is how many point-to-point requests the engine holds for MPI.
func (e *engine) inflightCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}
