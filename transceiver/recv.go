package transceiver

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/rankrun/rankrun/request"

	"github.com/rankrun/rankrun/topology"
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
		fs.msg = t.bufs.get(HeaderSize + payload)
		q, err := t.cfg.World.Irecv(fs.msg, fs.peer, s.dataTag)
		if err != nil {
			t.withdrawAll(s, map[int]bool{})
			t.endLease(s)
			return fmt.Errorf("transceiver: post fragment receive for request %d: %w", req.ID, err)
		}
		fs.req, fs.posted = q, true
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
		h := Header{Kind: KindRequestInfo, RequestID: uint64(req.ID), Sender: int32(t.cfg.Rank),
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
		t.genCancel(s, "a ctx rank cancelled before this gen rank started")
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
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.posted && !fs.done {
			st, done, err := fs.req.Test()
			if done {
				fs.done = true
				status := CodeOK
				if err == nil {
					err = t.acceptFragment(s, fs, fs.msg[:st.Len])
				}
				if err != nil {
					status = CodeVerify
					s.fail(err.Error())
				}
				t.bufs.put(fs.msg)
				fs.msg = nil
				if t.cfg.Faults == nil || !t.cfg.Faults.DropAck[s.req.ID] {
					_ = t.sendControl(fs.peer, Header{Kind: KindAck, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: status})
				}
			}
		}
		if !fs.done {
			all = false
		}
		if fs.withdrawn {
			withdrawn = true
		}
	}
	switch {
	case !all:
		if t.clk.Now().After(s.deadline) {
			t.genCancel(s, "transfer deadline passed")
		}
	case s.failed:
		t.setTerminal(s, StateFailed, s.why)
	case s.cancelling || withdrawn:
		// Only a fragment actually received counts: a withdrawn one
		// makes the transfer cancelled, never transferred.
		why := s.cancelReason
		if why == "" {
			why = "a ctx rank cancelled"
		}
		t.setTerminal(s, StateCancelled, why)
	case t.cfg.Faults != nil && t.cfg.Faults.FailReceive[s.req.ID]:
		t.setTerminal(s, StateFailed, "injected rank-local receive failure")
	default:
		t.setTerminal(s, StateTransferred, "")
	}
}

// acceptFragment checks a received fragment's header against what was
// expected, verifies every byte of the pattern and unpacks it.
func (t *Transceiver) acceptFragment(s *session, fs *fragState, msg []byte) error {
	h, payload, err := DecodeMessage(msg)
	if err != nil {
		return fmt.Errorf("fragment from ctx rank %d: %w", fs.f.CtxRank, err)
	}
	f := fs.f
	if h.Kind != KindFragment || request.ID(h.RequestID) != s.req.ID || int(h.LayerLo) != f.LayerLo || int(h.LayerHi) != f.LayerHi ||
		int(h.HeadLo) != f.HeadLo || int(h.HeadHi) != f.HeadHi || int(h.BlockMod) != f.BlockMod || int(h.BlockRem) != f.BlockRem {
		return fmt.Errorf("fragment from ctx rank %d: header %+v does not match the expected %s of request %d", f.CtxRank, h, f, s.req.ID)
	}
	if len(payload) != fs.payload {
		return fmt.Errorf("fragment from ctx rank %d: %d payload bytes, expected %d", f.CtxRank, len(payload), fs.payload)
	}
	t.stats.BytesReceived += int64(len(payload))
	s.bytes += int64(len(payload))
	run := t.shard.RunBytes(f.HeadLo, f.HeadHi)
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	pos := 0
	for b := f.BlockRem; b < totalBlocks; b += f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return fmt.Errorf("fragment %s covers block %d that gen rank %d does not hold", f, b, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		for layer := f.LayerLo; layer < f.LayerHi; layer++ {
			for kv := topology.K; kv <= topology.V; kv++ {
				off := t.shard.Offset(layer, kv, f.HeadLo, 0)
				copy(blk[off:off+run], payload[pos:pos+run])
				pos += run
			}
		}
		if l, kv, head, tok, ok := VerifyBlock(blk, t.shard, uint64(s.req.ID), b, f.LayerLo, f.LayerHi, f.HeadLo, f.HeadHi); !ok {
			return fmt.Errorf("request %d block %d from ctx rank %d: layer %d %v head %d token %d does not hold the expected bytes",
				s.req.ID, b, f.CtxRank, l, kv, head, tok)
		}
		runtime.Gosched() // see Prefill: let woken ranks run between blocks
	}
	s.verified += int64(len(payload))
	t.stats.BytesVerified += int64(len(payload))
	return nil
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
