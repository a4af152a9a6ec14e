package transceiver

import (
	"fmt"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/comm"
	"go.uber.org/zap"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

func (t *Transceiver) postControl() error {
	q, err := t.cfg.World.Irecv(t.ctlBuf, comm.AnySource, tagControl)
	if err != nil {
		return fmt.Errorf("transceiver: post control receive: %w", err)
	}
	t.ctl = q
	return nil
}

func (t *Transceiver) sendControl(dest int, h wire.Header) error {
	msg := wire.EncodeMessage(nil, h, nil)
	q, err := t.cfg.World.Isend(msg, dest, tagControl)
	if err != nil {
		return fmt.Errorf("transceiver: send %s to world rank %d: %w", h.Kind, dest, err)
	}
	t.outbox = append(t.outbox, q)
	return nil
}

func (t *Transceiver) pumpControl() {
	for t.ctl != nil {
		st, done, err := t.ctl.Test()
		if !done {
			return
		}
		if err != nil {
			t.stats.ControlErrors++
			t.cfg.Log.Warn("control receive failed", zap.Error(err))
		} else {
			t.handleControl(st.Source, t.ctlBuf[:st.Len])
		}
		if err := t.postControl(); err != nil {
			t.cfg.Log.Error("cannot repost control receive", zap.Error(err))
			t.ctl = nil
		}
	}
}

func (t *Transceiver) handleControl(src int, msg []byte) {
	t.activeAt = t.clk.Now()
	h, _, err := wire.DecodeMessage(msg)
	if err != nil {
		t.stats.ControlErrors++
		t.cfg.Log.Warn("malformed control message", zap.Int("from", src), zap.Error(err))
		return
	}
	id := request.ID(h.RequestID)
	s := t.sessions[id]
	switch {
	case h.Kind == wire.KindRequestInfo && t.cfg.Role == topology.Context:
		if s == nil {
			if t.finished[id] {
				return // a late info for a transfer this rank already ended
			}
			t.pendingInfo[id] = append(t.pendingInfo[id], h)
			return
		}
		t.applyInfo(s, h)
	case h.Kind == wire.KindAck && t.cfg.Role == topology.Context:
		t.handleAck(s, src, h)
	case h.Kind == wire.KindSending && t.cfg.Role == topology.Generation:
		if s != nil {
			for i := range s.frags {
				if s.frags[i].peer == src {
					s.frags[i].coming = true
				}
			}
		}
	case h.Kind == wire.KindDigest && t.cfg.Role == topology.Generation:
		if s == nil || s.state.terminal() {
			return // a digest for a transfer this rank already ended
		}
		t.digestArrived(s, src, h)
	case h.Kind == wire.KindCancel:
		t.handleCancel(s, src, h)
	case h.Kind == wire.KindCancelAck && t.cfg.Role == topology.Generation:
		if s != nil && !s.state.terminal() {
			if h.Status == wire.CodeFailed {
				t.peerFailed(s, src)
			}
			t.withdrawFrom(s, src)
		}
	case h.Kind == wire.KindError:
		if s != nil && !s.state.terminal() {
			s.failRelayed(fmt.Sprintf("peer world rank %d reported %s", src, h.Status))
			if t.cfg.Role == topology.Generation {
				// An error is not "I will not send": the peer may have
				// posted its fragment already. Ask it to cancel; it sends
				// or confirms, as for any cancel.
				t.genCancel(s, s.why)
			}
		}
	default:
		t.stats.ControlErrors++
		t.cfg.Log.Warn("unexpected control message", zap.Stringer("kind", h.Kind), zap.Int("from", src))
	}
}

// handleAck applies a GEN peer's acknowledgement of a fragment (CTX).
func (t *Transceiver) handleAck(s *session, src int, h wire.Header) {
	if s == nil {
		if !t.finished[request.ID(h.RequestID)] {
			t.stats.ControlErrors++
			t.cfg.Log.Warn("ack for an unknown request", zap.Uint64("request", h.RequestID), zap.Int("from", src))
		}
		return
	}
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer == src && !fs.acked {
			fs.acked = true
			if h.Status != wire.CodeOK && !s.state.terminal() {
				s.failRelayed(fmt.Sprintf("gen rank %d rejected the fragment: %s", src-t.nCtx, h.Status))
			}
			return
		}
	}
}

// handleCancel applies a peer's cancel (either role); a cancel for a
// session not started yet is remembered until it starts. A CTX rank whose
// session is already over answers at once: it will send nothing more, so
// a GEN peer that asks (its deadline passed) never waits on a session that
// cannot answer otherwise.
func (t *Transceiver) handleCancel(s *session, src int, h wire.Header) {
	id := request.ID(h.RequestID)
	if t.cfg.Role == topology.Context && (s == nil && t.finished[id] || s != nil && s.state.terminal()) {
		status := wire.CodeCancelled
		if s != nil && s.failed {
			status = wire.CodeFailed
		}
		_ = t.sendControl(src, wire.Header{Kind: wire.KindCancelAck, RequestID: h.RequestID, Sender: int32(t.cfg.Rank), Status: status})
		return
	}
	if s == nil {
		if !t.finished[id] {
			if t.earlyCancel[id] == nil {
				t.earlyCancel[id] = map[int]bool{}
			}
			// The value says whether the peer reported a failure.
			t.earlyCancel[id][src] = t.earlyCancel[id][src] || h.Status == wire.CodeFailed
		}
		return
	}
	if s.state.terminal() {
		return
	}
	if h.Status == wire.CodeFailed {
		t.peerFailed(s, src)
	}
	if t.cfg.Role == topology.Generation {
		// A CTX peer sends Cancel only for fragments it never posted.
		t.withdrawFrom(s, src)
		t.genCancelRelayed(s, fmt.Sprintf("ctx rank %d cancelled", src))
	} else {
		t.ctxPeerCancelled(s, src)
	}
}

func (t *Transceiver) applyInfo(s *session, h wire.Header) {
	g := t.genWorld(int(h.Sender))
	matched := false
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer == g {
			if fs.dataTag >= 0 {
				t.stats.ControlErrors++
				t.cfg.Log.Warn("duplicate request info", zap.Uint64("request", h.RequestID), zap.Int32("gen", h.Sender))
				_ = t.sendControl(g, wire.Header{Kind: wire.KindError, RequestID: h.RequestID, Sender: int32(t.cfg.Rank), Status: wire.CodeDuplicate})
				return
			}
			fs.dataTag = int(h.Fragment)
			matched = true
		}
	}
	if !matched && len(s.frags) > 0 {
		// A GEN rank this CTX rank sends nothing to; nothing to do.
		return
	}
	if s.state == StateInit {
		s.state = StateReady
	}
}
