package transceiver_test

import (
	"context"
	"testing"
	"time"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// cancelRun moves one request from CTX tp=2 to GEN tp=1 (the GEN rank
// receives a fragment from each CTX rank) with the given faults and
// returns, per role, the state the group agreed on.
func cancelRun(t *testing.T, timeout time.Duration, faults func(role topology.Role, rank int) *transceiver.Faults) map[topology.Role]request.Status {
	t.Helper()
	got := map[topology.Role]request.Status{}
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	q := transceiver.Request{ID: 100, Tokens: 64}
	runRanks(t, setupOpts{ctx: "tp=2", gen: "tp=1", timeout: timeout, faults: faults}, func(ctx context.Context, r *rank) error {
		if err := start(r, q); err != nil {
			return err
		}
		reaped, err := drain(ctx, r, 1)
		if err != nil {
			return err
		}
		<-mu
		if prev, ok := got[r.role]; ok && prev != reaped[0].Status {
			mu <- struct{}{}
			return errorf("%s ranks disagree: %s vs %s", r.role, prev, reaped[0].Status)
		}
		got[r.role] = reaped[0].Status
		mu <- struct{}{}
		return nil
	})
	return got
}

// A cancel seen by one CTX rank reaches the GEN rank, which must not
// withdraw the receive of the other CTX rank's fragment: that rank's send
// would never complete (review finding: the group livelocked).
func TestCancelOnOneCtxRankDoesNotStrandItsPeer(t *testing.T) {
	start := time.Now()
	got := cancelRun(t, 30*time.Second, func(role topology.Role, rank int) *transceiver.Faults {
		if role == topology.Context && rank == 0 {
			return &transceiver.Faults{Cancel: map[request.ID]bool{100: true}}
		}
		return nil
	})
	if got[topology.Context] != request.Cancelled || got[topology.Generation] != request.Cancelled {
		t.Fatalf("agreed states %v, want cancelled on both sides", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the cancel took %v: it waited for the 30 s transfer deadline instead of the peers", d)
	}
}

// One CTX rank never sends; the GEN rank's deadline asks both CTX ranks to
// cancel. The fragment that did arrive must not make the transfer count as
// transferred: a withdrawn fragment means cancelled.
func TestPartialTransferIsNeverTransferred(t *testing.T) {
	got := cancelRun(t, 300*time.Millisecond, func(role topology.Role, rank int) *transceiver.Faults {
		if role == topology.Context && rank == 1 {
			return &transceiver.Faults{Withhold: map[request.ID]bool{100: true}}
		}
		return nil
	})
	if got[topology.Generation] != request.Cancelled {
		t.Fatalf("GEN agreed %v with one fragment never sent, want cancelled", got[topology.Generation])
	}
	if got[topology.Context] != request.Cancelled {
		t.Fatalf("CTX agreed %v, want cancelled (union over the TP group)", got[topology.Context])
	}
}

// A duplicate request info makes the CTX rank answer with an Error while
// its fragment may already be posted. The GEN rank must not withdraw that
// receive (the send would never complete): it asks for a cancel, and both
// sides end and are reaped.
func TestErrorReplyDoesNotStrandAPostedSend(t *testing.T) {
	q := transceiver.Request{ID: 100, Tokens: 256}
	start := time.Now()
	runRanks(t, setupOpts{ctx: "tp=1", gen: "tp=1", timeout: 30 * time.Second}, func(ctx context.Context, r *rank) error {
		if r.role == topology.Generation {
			if err := startRecv(r, q); err != nil {
				return err
			}
			// The same request info again (the first data tag is 16).
			dup := wire.EncodeMessage(nil, wire.Header{Kind: wire.KindRequestInfo,
				RequestID: uint64(q.ID), Sender: 0, Fragment: 16, BlockCount: 32}, nil)
			sq, err := r.world.Isend(dup, 0, 1)
			if err != nil {
				return err
			}
			if _, err := sq.Wait(ctx); err != nil {
				return err
			}
		} else {
			if err := prefill(r, q); err != nil {
				return err
			}
			if err := r.tr.StartSend(q); err != nil {
				return err
			}
		}
		_, err := drain(ctx, r, 1)
		return err
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v: a send was stranded until the deadline", d)
	}
}
