package transceiver

import (
	"fmt"
	"maps"
	"runtime"
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
	s := &session{req: req, started: now, deadline: now.Add(t.cfg.TransferTimeout)}
	if err := t.leaseBlocks(s); err != nil {
		return err
	}
	for _, f := range t.mapping.CtxFragments(req.CtxDP, req.GenDP, t.cfg.Rank) {
		s.frags = append(s.frags, fragState{f: f, peer: t.genWorld(f.GenRank), dataTag: -1})
	}
	t.everSent = true
	t.addSession(s)
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
			if err := t.postFragment(s, fs); err != nil {
				s.fail(err.Error())
			}
		}
		if fs.posted && !fs.done {
			if _, done, err := fs.req.Test(); done {
				fs.done = true
				t.bufs.put(fs.msg)
				fs.msg = nil
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
	switch {
	case s.inFlight():
		if t.clk.Now().After(s.deadline) && !s.cancelling && !s.refused {
			s.refused = true // counted once; the cancel is retried every pump
			t.stats.CancelRefused++
		}
	case s.failed:
		// Every GEN peer must get its bytes or a Cancel: tell the ones
		// this rank never sent to before the session ends.
		t.stopAll(s)
		t.setTerminal(s, StateFailed, s.why)
	case resolved && s.cancelling:
		t.setTerminal(s, StateCancelled, s.cancelReason)
	case resolved:
		t.setTerminal(s, StateTransferred, "")
	case t.clk.Now().After(s.deadline):
		t.tryCancel(s, "transfer deadline passed")
	}
}

func (t *Transceiver) postFragment(s *session, fs *fragState) error {
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	payload := t.mapping.FragmentBytes(fs.f, fs.f.BlockCount(totalBlocks))
	msg := t.bufs.get(HeaderSize + payload)
	p := msg[HeaderSize:HeaderSize]
	run := t.shard.RunBytes(fs.f.HeadLo, fs.f.HeadHi)
	for b := fs.f.BlockRem; b < totalBlocks; b += fs.f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return fmt.Errorf("fragment %s covers block %d that ctx rank %d does not hold", fs.f, b, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		for layer := fs.f.LayerLo; layer < fs.f.LayerHi; layer++ {
			for kv := topology.K; kv <= topology.V; kv++ {
				off := t.shard.Offset(layer, kv, fs.f.HeadLo, 0)
				p = append(p, blk[off:off+run]...)
			}
		}
		runtime.Gosched() // see Prefill: let woken ranks run between blocks
	}
	if len(p) != payload {
		return fmt.Errorf("fragment %s packed %d bytes, expected %d", fs.f, len(p), payload)
	}
	if t.cfg.Faults != nil && t.cfg.Faults.CorruptFragment[s.req.ID] && payload > 0 {
		p[payload/2] ^= 0xFF
	}
	h := Header{Kind: KindFragment, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank),
		LayerLo: uint16(fs.f.LayerLo), LayerHi: uint16(fs.f.LayerHi), HeadLo: uint16(fs.f.HeadLo), HeadHi: uint16(fs.f.HeadHi),
		BlockMod: uint16(fs.f.BlockMod), BlockRem: uint16(fs.f.BlockRem), BlockCount: uint32(totalBlocks)}
	// The payload is already in place after the header: write the header
	// in front of it instead of copying the payload again.
	h.PayloadLen = uint32(payload)
	if err := h.Put(msg[:HeaderSize]); err != nil {
		return fmt.Errorf("fragment header: %w", err)
	}
	q, err := t.cfg.World.Isend(msg, fs.peer, fs.dataTag)
	if err != nil {
		return fmt.Errorf("send fragment to world rank %d: %w", fs.peer, err)
	}
	fs.msg, fs.req, fs.posted, fs.payload = msg, q, true, payload
	s.bytes += int64(payload)
	t.stats.BytesSent += int64(payload)
	if s.state < StateTransferring {
		s.state = StateTransferring
	}
	return nil
}
