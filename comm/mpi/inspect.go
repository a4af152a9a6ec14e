//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// InspectPeers asks every other rank of the group for its flight records,
// over the group's inspection channel (a duplicate communicator used only
// for this). Peers answer from their responder, which runs whenever they
// poll MPI and every few milliseconds from a background goroutine. Peers
// that have not answered when ctx ends get PeerRecords.Err.
func (c *mpiComm) InspectPeers(ctx context.Context) []comm.PeerRecords {
	out := make([]comm.PeerRecords, c.size)
	for r := range out {
		out[r].Rank = r
	}
	out[c.rank].Records, out[c.rank].Pending = c.e.rec.Snapshot(), c.e.rec.Pending()
	e := c.e
	waiting := map[int]bool{}
	e.mu.Lock()
	out[c.rank].Entered, out[c.rank].Counted, out[c.rank].Returned = c.entered, true, e.returned
	e.nonce++
	nonce := e.nonce
	for p := range c.size {
		if p == c.rank {
			continue
		}
		if c.insp == nil || e.finalized {
			out[p].Err = fmt.Errorf("mpi: group %q is closed on rank %d", c.name, c.rank)
			continue
		}
		req := C.rr_p2p_new()
		req.word = C.int64_t(nonce)
		if rc := C.rr_insp_request(c.insp, req, C.int(p)); rc != C.MPI_SUCCESS {
			out[p].Err = mpiError(rc, "InspectPeers", "MPI_Isend", c.name, c.rank)
			C.rr_p2p_free(req)
			continue
		}
		e.sends = append(e.sends, req)
		waiting[p] = true
	}
	e.mu.Unlock()

	done := ctx.Done()
	start := time.Now()
	for len(waiting) > 0 {
		e.mu.Lock()
		e.serviceLocked() // answer peers that are inspecting us at the same time
		for p := range waiting {
			if c.insp == nil {
				break
			}
			for {
				var buf *C.char
				var n C.int
				rc := C.rr_insp_take(c.insp, C.int(p), &buf, &n)
				if rc != C.MPI_SUCCESS {
					out[p].Err = mpiError(rc, "InspectPeers", "MPI_Mrecv", c.name, c.rank)
					delete(waiting, p)
					C.free(unsafe.Pointer(buf))
					break
				}
				if buf == nil {
					break
				}
				msg := C.GoBytes(unsafe.Pointer(buf), n)
				C.free(unsafe.Pointer(buf))
				rp, err := decodeReply(msg)
				if err != nil {
					out[p].Err = fmt.Errorf("rank %d of group %q: %w", p, c.name, err)
					delete(waiting, p)
					break
				}
				if rp.nonce != nonce {
					continue // a late reply to an earlier inspection
				}
				out[p].Records, out[p].Pending = rp.recs, rp.pending
				out[p].Entered, out[p].Counted, out[p].Returned = rp.entered, true, rp.returned
				delete(waiting, p)
				break
			}
		}
		e.mu.Unlock()
		if len(waiting) == 0 {
			break
		}
		select {
		case <-done:
			for p := range waiting {
				out[p].Err = &noAnswer{after: time.Since(start).Round(time.Millisecond), cause: ctx.Err()}
			}
			return out
		default:
		}
		backoff(time.Since(start) >= sleepAfter)
	}
	return out
}

// inspectBudget is how long a timed-out collective asks its peers: a tenth
// of the bound, at least 200 ms (a peer's responder answers within about
// 5 ms, more on a loaded machine) and at most inspectMax.
func inspectBudget(bound time.Duration) time.Duration {
	return min(max(bound/10, 200*time.Millisecond), inspectMax)
}

const inspectMax = 2 * time.Second

// timedOut ends the collective in flight on c after its bound (the
// communicator's, plus the caller's grace) passed: the
// collective is orphaned, the stall inspector asks every peer how far it
// got, and the *comm.TimeoutError (which also breaks c) names the ranks
// that never arrived: those that answered with fewer collectives entered
// here than this one's number, and those that did not answer. collMu held.
func (c *mpiComm) timedOut(kind flight.Kind, bound time.Duration) error {
	c.e.mu.Lock()
	seq := c.entered
	c.e.mu.Unlock()
	te := &comm.TimeoutError{Group: c.name, Self: c.rank, Bound: bound, WorldRanks: c.worlds,
		Waiting: comm.Entry{Rank: c.rank, Seq: seq, Kind: kind, Site: callerSite()}}
	c.orphan(te)
	ctx, cancel := context.WithTimeout(context.Background(), inspectBudget(c.timeout))
	defer cancel()
	te.Peers = c.InspectPeers(ctx)
	for _, p := range te.Peers {
		if p.Rank != c.rank && (p.Err != nil || p.Counted && p.Entered < seq) {
			te.Missing = append(te.Missing, p.Rank)
		}
	}
	return te
}

// leftByReturned follows up a "returned" notice while a collective waits
// on c: it asks every peer how far it got, and where a peer whose program
// returned never entered this collective, the collective ends at once
// with the *comm.TimeoutError timedOut would give at the bound, naming
// that peer as returned (no bound ran out: Bound 0). A peer that returned
// after entering it (its part is on its way) is waited for as before: nil.
// collMu held.
func (c *mpiComm) leftByReturned(kind flight.Kind) error {
	c.e.mu.Lock()
	seq := c.entered
	c.e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), inspectBudget(c.timeout))
	defer cancel()
	peers := c.InspectPeers(ctx)
	te := &comm.TimeoutError{Group: c.name, Self: c.rank, WorldRanks: c.worlds, Peers: peers,
		Waiting: comm.Entry{Rank: c.rank, Seq: seq, Kind: kind, Site: callerSite()}}
	for _, p := range peers {
		if p.Rank != c.rank && p.Returned && p.Counted && p.Entered < seq {
			te.Missing = append(te.Missing, p.Rank)
		}
	}
	if len(te.Missing) == 0 {
		return nil
	}
	c.orphan(te)
	return te
}

// callerSite names the first caller outside the comm packages (this one,
// the checked layer): the code that entered the collective.
func callerSite() string {
	var pcs [32]uintptr
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "github.com/rankrun/rankrun/comm.") &&
			!strings.HasPrefix(f.Function, "github.com/rankrun/rankrun/comm/mpi.") {
			return flight.SiteString(f.PC)
		}
		if !more {
			return "?"
		}
	}
}

// noAnswer is PeerRecords.Err for a peer that did not answer the stall
// inspector before its context ended (it unwraps to the context's error).
type noAnswer struct {
	after time.Duration
	cause error
}

func (e *noAnswer) Error() string {
	return fmt.Sprintf("no answer to the stall inspector within %v", e.after)
}
func (e *noAnswer) Unwrap() error { return e.cause }
