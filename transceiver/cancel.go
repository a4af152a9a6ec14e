package transceiver

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// withdrawFrom withdraws the session's unmatched receives from CTX peer
// (GEN), which said it will not send. A receive that already matched stays:
// its bytes arrive and are acknowledged.
func (t *Transceiver) withdrawFrom(s *session, peer int) {
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer == peer && fs.posted && !fs.done {
			_ = t.withdraw(fs) // matched: it completes as a receive
		}
	}
}

// withdraw cancels one posted receive and, when it was withdrawn, frees
// its buffer (nothing writes a withdrawn receive). An error means it had
// matched: it completes as a receive.
func (t *Transceiver) withdraw(fs *fragState) error {
	if err := fs.req.Cancel(); err != nil {
		return err
	}
	fs.done, fs.withdrawn = true, true
	t.bufs.put(fs.msg)
	t.bufs.putParts(fs.parts)
	fs.msg, fs.parts = nil, nil
	return nil
}

// withdrawAll withdraws every unmatched receive of s (at shutdown, or
// when s failed to start). A peer with a receive that had matched and is
// still arriving after its Cancel (the backend bounds that wait: a sender
// frozen mid-message never finishes) goes in stuck, and its other
// receives, in this session and the next, are left as they are: Close
// costs one such bound per stuck peer, not one per receive.
func (t *Transceiver) withdrawAll(s *session, stuck map[int]bool) {
	for i := range s.frags {
		fs := &s.frags[i]
		if !fs.posted || fs.done || stuck[fs.peer] {
			continue
		}
		if t.withdraw(fs) != nil {
			if _, done, _ := fs.req.Test(); !done {
				stuck[fs.peer] = true
			} else if fs.loan != nil {
				// Matched, never to be read: give the sender its bytes
				// back, or its send never completes.
				fs.loan.Release()
				fs.loan = nil
			}
		}
	}
}

// genCancel starts cancelling a receive session: every CTX peer that may
// still send is asked to cancel. Its receives stay posted until the peer
// either sends (the bytes are received) or confirms it will not
// (CancelAck): withdrawing a receive a peer may still match would strand
// that peer's send forever.
func (t *Transceiver) genCancel(s *session, why string) {
	t.genCancelFrom(s, why, false)
}

// genCancelRelayed is genCancel on a CTX peer's word: why names the peer.
func (t *Transceiver) genCancelRelayed(s *session, why string) {
	t.genCancelFrom(s, why, true)
}

func (t *Transceiver) genCancelFrom(s *session, why string, relayed bool) {
	if s.cancelling || s.state.terminal() {
		return
	}
	s.cancelling, s.cancelReason, s.cancelRelayed = true, why, relayed
	asked := map[int]bool{}
	for _, fs := range s.frags {
		if !fs.done && !asked[fs.peer] {
			asked[fs.peer] = true
			_ = t.sendControl(fs.peer, wire.Header{Kind: wire.KindCancel, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: s.cancelStatus()})
		}
	}
}

// ctxPeerCancelled applies a cancel from GEN peer g to a send session: the
// fragments for g not yet posted will not be sent (CancelAck tells g), and
// the cancel spreads to the other GEN peers this rank has not sent to yet.
// Fragments already posted complete normally (g keeps their receives).
func (t *Transceiver) ctxPeerCancelled(s *session, g int) {
	if s.state.terminal() {
		return
	}
	if !s.cancelling {
		s.cancelling, s.cancelReason, s.cancelRelayed = true, fmt.Sprintf("gen rank %d cancelled", g-t.nCtx), true
	}
	t.ctxStopSending(s, g, wire.KindCancelAck)
	for _, fs := range s.frags {
		if fs.peer != g {
			t.ctxStopSending(s, fs.peer, wire.KindCancel)
		}
	}
}

// ctxStopSending cancels the fragments for GEN peer g when none of them has
// been posted, and tells g with kind (Cancel or CancelAck). If one was
// posted, the rest are sent too: g then keeps all of its receives.
func (t *Transceiver) ctxStopSending(s *session, g int, kind wire.Kind) {
	changed := false
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer != g {
			continue
		}
		if fs.posted {
			return
		}
		if !fs.cancelled {
			changed = true
		}
	}
	if !changed {
		return
	}
	for i := range s.frags {
		if fs := &s.frags[i]; fs.peer == g {
			fs.cancelled = true
		}
	}
	_ = t.sendControl(g, wire.Header{Kind: kind, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: s.cancelStatus()})
}

// tryCancel asks to cancel a session. It is refused (and retried by the
// caller's next pump) while a write is in flight. CTX: fragments not yet
// sent are cancelled and their GEN peers told. GEN: the CTX peers are asked
// to cancel; the session ends once each has sent or confirmed.
func (t *Transceiver) tryCancel(s *session, why string) {
	if s.state.terminal() {
		return
	}
	if t.cfg.Role == topology.Generation {
		t.genCancel(s, why)
		return
	}
	if s.inFlight() {
		t.stats.CancelRefused++
		return
	}
	if !s.cancelling {
		s.cancelling, s.cancelReason = true, why
	}
	t.stopAll(s)
	t.progressSend(s)
}

// stopAll cancels, and announces to their GEN peers, every fragment of a
// send session that was not posted.
func (t *Transceiver) stopAll(s *session) {
	peers := map[int]bool{}
	for _, fs := range s.frags {
		peers[fs.peer] = true
	}
	for _, g := range slices.Sorted(maps.Keys(peers)) {
		t.ctxStopSending(s, g, wire.KindCancel)
	}
}
