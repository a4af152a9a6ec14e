package transceiver

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rankrun/rankrun/topology"
)

// StartSend opens the CTX send session of req after its prefill: it leases
// the request's blocks (the caller allocated and filled them in Pool) and
// sends each
// fragment as soon as the GEN rank's request info is known. Every CTX rank
// of the request's executor group calls it for the same requests in the same
// iteration, which makes the "ever sent" flag flip on all of them together.
// The lease ends when the group agrees on the outcome; the caller then
// releases the blocks.
func (t *Transceiver) StartSend(req Request) error {
	if err := t.canStart(topology.Context, "StartSend", req.ID); err != nil {
		return err
	}
	now := t.clk.Now()
	t.activeAt = now
	s := &session{req: req, started: now, deadline: now.Add(t.cfg.TransferTimeout)}
	if err := t.leaseBlocks(s); err != nil {
		return err
	}
	for _, f := range t.mapping.CtxFragments(req.CtxDP, req.GenDP, t.cfg.Rank) {
		s.frags = append(s.frags, fragState{f: f, peer: t.genWorld(f.GenRank), dataTag: -1})
	}
	t.everSent = true
	t.addSession(s)
	// Request info that has arrived but not been read yet: read it now,
	// so that fragments whose GEN peer is known leave in this call.
	t.pumpControl()
	for _, h := range t.pendingInfo[req.ID] {
		t.applyInfo(s, h)
	}
	delete(t.pendingInfo, req.ID)
	if len(s.frags) == 0 {
		// This rank holds only duplicated heads another rank sends.
		t.setTerminal(s, StateTransferred, "")
	}
	early := t.earlyCancel[req.ID]
	for _, g := range slices.Sorted(maps.Keys(early)) {
		if early[g] {
			t.peerFailed(s, g)
		}
		t.ctxPeerCancelled(s, g)
	}
	delete(t.earlyCancel, req.ID)
	if t.cfg.Faults != nil && t.cfg.Faults.Cancel[req.ID] {
		t.tryCancel(s, "cancelled on this rank (injected)")
	}
	t.progressSend(s)
	return nil
}

// progressSend packs and posts every fragment whose peer is known, tests
// posted sends, and decides terminal states. Only the acknowledgement
// completes a fragment.
func (t *Transceiver) progressSend(s *session) {
	if s.state.terminal() {
		return
	}
	resolved := true
	for i := range s.frags {
		fs := &s.frags[i]
		if !fs.posted && !fs.cancelled && fs.dataTag >= 0 && !s.failed && !s.cancelling &&
			(t.cfg.Faults == nil || !t.cfg.Faults.Withhold[s.req.ID]) {
			if t.injectSendFailure(s) {
				continue
			}
			if err := t.postFragment(s, fs); err != nil {
				s.fail(err.Error())
			}
		}
		if fs.posted && !fs.done {
			if _, done, err := fs.req.Test(); done {
				fs.done, t.activeAt = true, t.clk.Now()
				t.bufs.put(fs.msg)
				t.bufs.putParts(fs.parts)
				fs.msg, fs.parts = nil, nil
				if err != nil {
					s.fail(err.Error())
				}
			}
		}
		// A fragment is settled when it will not be sent, or when it was
		// delivered and acknowledged (or a cancel stopped the wait for
		// the acknowledgement: the bytes left, nothing is in flight).
		if !fs.cancelled && !(fs.posted && fs.done && (fs.acked || s.cancelling)) {
			resolved = false
		}
	}
	t.injectSendFailure(s) // after=K at or past the fragments this rank sends
	// Digests follow their fragments, once every fragment that could
	// leave has left.
	for i := range s.frags {
		if fs := &s.frags[i]; fs.digestDue {
			if err := t.sendDigest(s, fs); err != nil {
				s.fail(err.Error())
			}
		}
	}
	switch {
	case s.inFlight():
		if t.clk.Now().After(s.deadline) && !s.cancelling && !s.refused {
			s.refused = true // counted once; the cancel is retried every pump
			t.stats.CancelRefused++
		}
	case s.failed:
		// Every GEN peer must get its bytes or a Cancel: tell the ones
		// this rank never sent to before the session ends (the
		// silent-start-failure replay does not, for a transfer it could
		// not start).
		if !(s.notStarted && t.cfg.Replays.SilentStartFailure) {
			t.stopAll(s)
		}
		t.setTerminal(s, StateFailed, s.why)
	case resolved && s.cancelling:
		t.setTerminal(s, StateCancelled, s.cancelReason)
	case resolved:
		t.setTerminal(s, StateTransferred, "")
	case t.deadlinePassed(s):
		t.tryCancel(s, fmt.Sprintf("the transfer timeout (%v) passed", t.cfg.TransferTimeout))
	}
}

// injectSendFailure fails s as a fail-send fault says: once after=K of
// this rank's fragments have left (0: before any byte moves). It reports
// whether s failed.
func (t *Transceiver) injectSendFailure(s *session) bool {
	after, ok := t.cfg.Faults.failSend(s.req.ID)
	if !ok || s.failed || s.postedFrags() < min(after, len(s.frags)) {
		return s.failed
	}
	if after == 0 {
		s.fail(fmt.Sprintf("ctx rank %d could not start the transfer (injected)", t.cfg.Rank))
		s.notStarted = true
	} else {
		s.fail(fmt.Sprintf("ctx rank %d's send failed after %d fragments left (injected)", t.cfg.Rank, s.postedFrags()))
	}
	return true
}
