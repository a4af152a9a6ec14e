//go:build mpi

package mpi

// #include "cmpi.h"
import "C"

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
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
	out[c.rank].Records = c.e.rec.Snapshot()
	e := c.e
	waiting := map[int]bool{}
	e.mu.Lock()
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
	waitStart := time.Now()
	for i := 0; len(waiting) > 0; i++ {
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
				got, recs, err := decodeReply(msg)
				if err != nil {
					out[p].Err = fmt.Errorf("rank %d of group %q: %w", p, c.name, err)
					delete(waiting, p)
					break
				}
				if got != nonce {
					continue // a late reply to an earlier inspection
				}
				out[p].Records = recs
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
				out[p].Err = fmt.Errorf("mpi: rank %d of group %q did not answer the stall inspector: %w", p, c.name, ctx.Err())
			}
			return out
		default:
		}
		backoff(i, waitStart)
	}
	return out
}
