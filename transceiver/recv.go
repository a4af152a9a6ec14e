package transceiver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/request"

	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// StartReceive opens the GEN receive session of req: it leases the
// destination blocks (the caller allocated them in Pool, BlocksFor(Tokens)
// of them), posts a receive for every expected fragment and sends request
// info to the CTX peers. The lease ends when the group agrees on the
// outcome; the caller then releases the blocks (a failed or cancelled
// transfer at once, a completed one when decoding is done).
func (t *Transceiver) StartReceive(req Request) error {
	if err := t.canStart(topology.Generation, "StartReceive", req.ID); err != nil {
		return err
	}
	now := t.clk.Now()
	t.activeAt = now
	s := &session{req: req, started: now, deadline: now.Add(t.cfg.TransferTimeout), dataTag: t.allocTag()}
	if err := t.leaseBlocks(s); err != nil {
		return err
	}
	totalBlocks := t.cfg.Model.Blocks(req.Tokens)
	for _, f := range t.mapping.Fragments(req.CtxDP, req.GenDP) {
		if f.GenRank != t.cfg.Rank {
			continue
		}
		payload := t.mapping.FragmentBytes(f, f.BlockCount(totalBlocks))
		fs := fragState{f: f, peer: f.CtxRank, dataTag: s.dataTag, payload: payload}
		if failed, ok := t.earlyCancel[req.ID][fs.peer]; ok {
			// That CTX rank cancelled before we started: it will not send.
			if failed {
				t.peerFailed(s, fs.peer)
			}
			fs.done, fs.withdrawn = true, true
			s.frags = append(s.frags, fs)
			continue
		}
		if err := t.postReceive(s, &fs); err != nil {
			t.withdrawAll(s, map[int]bool{})
			t.endLease(s)
			return fmt.Errorf("transceiver: post fragment receive for request %d: %w", req.ID, err)
		}
		fs.posted = true
		s.frags = append(s.frags, fs)
	}
	t.addSession(s)
	// Request info goes to every CTX rank of the request's DP index, so
	// that ranks with nothing to send for us still learn the request.
	peers := map[int]bool{}
	for _, f := range s.frags {
		if !f.withdrawn {
			peers[f.f.CtxRank] = true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(peers)) {
		h := wire.Header{Kind: wire.KindRequestInfo, RequestID: uint64(req.ID), Sender: int32(t.cfg.Rank),
			Fragment: uint32(s.dataTag), BlockCount: uint32(totalBlocks)}
		if err := t.sendControl(p, h); err != nil {
			return err
		}
	}
	s.state = StateTransferring
	if len(s.frags) == 0 {
		t.setTerminal(s, StateTransferred, "")
	}
	if len(t.earlyCancel[req.ID]) > 0 {
		t.genCancelRelayed(s, "a ctx rank cancelled before this gen rank started")
	}
	delete(t.earlyCancel, req.ID)
	if t.cfg.Faults != nil && t.cfg.Faults.Cancel[req.ID] {
		t.tryCancel(s, "cancelled on this rank (injected)")
	}
	return nil
}

// progressRecv tests posted fragment receives, verifies and unpacks what
// arrived, acknowledges it, and decides terminal states.
func (t *Transceiver) progressRecv(s *session) {
	if s.state.terminal() {
		return
	}
	all, withdrawn := true, false
	late := t.deadlinePassed(s)
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.posted && !fs.done {
			st, done, err := fs.req.Test()
			if done {
				fs.done, t.activeAt = true, t.clk.Now()
				parts, free := t.received(fs, st)
				if err == nil {
					err = t.acceptFragment(s, fs, parts, st.Len)
				}
				free()
				switch {
				case err != nil:
					s.fail(err.Error())
					t.ackFragment(s, fs, wire.CodeVerify)
				case fs.awaitDigest:
					if t.compareDigest(s, fs) { // the digest came first
						t.settleDigest(s, fs)
					}
				default:
					t.ackFragment(s, fs, wire.CodeOK)
				}
			}
		}
		if fs.awaitDigest && late {
			// The bytes are in, the sender's digest never came: no write
			// is in flight, and the fragment cannot be verified.
			fs.awaitDigest = false
			fs.digestErr = fmt.Sprintf("request %d fragment from ctx rank %d: no payload digest by the transfer deadline", s.req.ID, fs.f.CtxRank)
			t.settleDigest(s, fs)
		}
		if !fs.done || fs.awaitDigest {
			all = false
		}
		if fs.withdrawn {
			withdrawn = true
		}
	}
	switch {
	case !all:
		if late {
			t.genCancel(s, fmt.Sprintf("the transfer timeout (%v) passed", t.cfg.TransferTimeout))
		}
	case s.failed:
		t.setTerminal(s, StateFailed, s.why)
	case s.cancelling || withdrawn:
		// Only a fragment actually received counts: a withdrawn one
		// makes the transfer cancelled, never transferred.
		why := s.cancelReason
		if why == "" {
			why, s.cancelRelayed = "a ctx rank cancelled", true
		}
		t.setTerminal(s, StateCancelled, why)
	case t.cfg.Faults != nil && t.cfg.Faults.FailReceive[s.req.ID]:
		t.setTerminal(s, StateFailed, "injected rank-local receive failure")
	default:
		t.setTerminal(s, StateTransferred, "")
	}
}

// ReceiveSync blocks this GEN rank in a rank-local receive until request
// id's session is terminal on this rank or ctx ends (sync transfer mode).
// It never enters a collective; the group agrees later in a status check.
func (t *Transceiver) ReceiveSync(ctx context.Context, id request.ID) error {
	s := t.sessions[id]
	if s == nil {
		return fmt.Errorf("%w: no receive session for request %d", ErrUnknown, id)
	}
	for {
		t.Pump()
		if s.state.terminal() {
			return nil
		}
		// Past the deadline the session is being cancelled and its
		// peers' answers are awaited: keep waiting on events, not spinning.
		wake := s.deadline
		if floor := t.clk.Now().Add(time.Millisecond); wake.Before(floor) {
			wake = floor
		}
		if err := t.WaitEvent(ctx, wake); err != nil {
			return err
		}
	}
}

// ackFragment acknowledges a received fragment to its sender (unless an
// injected fault drops it): the CTX send is complete only then.
func (t *Transceiver) ackFragment(s *session, fs *fragState, status wire.StatusCode) {
	if t.cfg.Faults != nil && t.cfg.Faults.DropAck[s.req.ID] {
		return
	}
	h := wire.Header{Kind: wire.KindAck, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: status}
	if t.cfg.Faults != nil && t.cfg.Faults.DelayAck[s.req.ID] > 0 {
		t.delayed = append(t.delayed, delayedAck{due: t.clk.Now().Add(t.cfg.Faults.DelayAck[s.req.ID]), peer: fs.peer, h: h})
		return
	}
	_ = t.sendControl(fs.peer, h)
}

// delayedAck is an acknowledgement a delay-ack fault holds back until due.
type delayedAck struct {
	due  time.Time
	peer int
	h    wire.Header
}

// HeldAcks counts the acknowledgements a delay-ack fault still holds: a
// GEN rank does not end before it has sent them.
func (t *Transceiver) HeldAcks() int { return len(t.delayed) }

// NextHeldAck is when the next held acknowledgement falls due (ok false:
// none is held).
func (t *Transceiver) NextHeldAck() (time.Time, bool) {
	var next time.Time
	for _, d := range t.delayed {
		if next.IsZero() || d.due.Before(next) {
			next = d.due
		}
	}
	return next, !next.IsZero()
}

// sendDelayedAcks sends the held acknowledgements that are due (each
// Pump: the first pump at or after its time sends it).
func (t *Transceiver) sendDelayedAcks() {
	if len(t.delayed) == 0 {
		return
	}
	now := t.clk.Now()
	keep := t.delayed[:0]
	for _, d := range t.delayed {
		if now.Before(d.due) {
			keep = append(keep, d)
			continue
		}
		_ = t.sendControl(d.peer, d.h)
	}
	t.delayed = keep
}

// settleDigest acknowledges a checksum fragment compareDigest settled (or
// one whose digest never came): verified, or the request fails naming the
// mismatch.
func (t *Transceiver) settleDigest(s *session, fs *fragState) {
	if fs.digestErr != "" {
		s.fail(fs.digestErr)
		t.ackFragment(s, fs, wire.CodeVerify)
		return
	}
	t.ackFragment(s, fs, wire.CodeOK)
}

// digestArrived applies a Digest message from world rank src: the sender's
// digest of one fragment, which settles it if its bytes are in.
func (t *Transceiver) digestArrived(s *session, src int, h wire.Header) {
	i, ok := digestTarget(s, src, h)
	if !ok {
		t.stats.ControlErrors++
		t.cfg.Log.Warn("digest for no fragment awaiting one", zap.Uint64("request", h.RequestID), zap.Int("from", src))
		return
	}
	fs := &s.frags[i]
	fs.digest, fs.haveDigest = digest(h.Digest), true
	if t.compareDigest(s, fs) {
		t.settleDigest(s, fs) // the next Pump decides the session
	}
}
