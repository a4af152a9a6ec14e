package transceiver

// KV bytes on both sides of a fragment. The CTX rank gathers the
// fragment's runs from its blocks: where the backend lends bytes
// (comm.Lender: ranks in one address space) or sends from several buffers
// (comm.Vectored) it sends the runs where they lie, otherwise it packs them
// after the header into one message. The GEN rank copies every run into
// its blocks in one pass with its check: the KV pattern of each token for
// VerifyFull; for VerifyChecksum an xxh3 digest of each run just copied,
// compared with the sender's, which follows the fragment in a Digest
// message (digest.go: the sender hashes while the bytes travel); nothing
// for VerifyOff. Whatever the mode, the header, the geometry and the
// length are checked.

import (
	"fmt"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver/internal/wordseq"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// eachRun calls fn with every run of fragment f in wire order: for each of
// the fragment's blocks (request block b, held at blk), for each layer, K
// then V, heads [HeadLo, HeadHi) of every token, blk[off:off+run]. side
// names the rank in the error of a block it does not hold.
func (t *Transceiver) eachRun(s *session, f topology.Fragment, side string, fn func(b int, blk []byte, layer int, kv topology.KV, off int) error) error {
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	for b := f.BlockRem; b < totalBlocks; b += f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return fmt.Errorf("fragment %s covers block %d that %s rank %d does not hold", f, b, side, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		for layer := f.LayerLo; layer < f.LayerHi; layer++ {
			for kv := topology.K; kv <= topology.V; kv++ {
				if err := fn(b, blk, layer, kv, t.shard.Offset(layer, kv, f.HeadLo, 0)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// postFragment gathers fragment fs of s and posts its send.
func (t *Transceiver) postFragment(s *session, fs *fragState) error {
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	payload := t.mapping.FragmentBytes(fs.f, fs.f.BlockCount(totalBlocks))
	run := t.shard.RunBytes(fs.f.HeadLo, fs.f.HeadHi)
	var corruptAt CorruptAt
	corrupt := false
	if t.cfg.Faults != nil && payload > 0 {
		corruptAt, corrupt = t.cfg.Faults.CorruptFragment[s.req.ID]
	}
	// A corrupted fragment is packed: the fault flips a byte of a copy,
	// never of the CTX rank's own blocks.
	lend := (t.lender != nil || t.vector != nil) && !corrupt // send the runs where they lie
	sum := t.cfg.Verify == VerifyChecksum
	var d digest
	if sum {
		d = newDigest(s.req.ID, fs.f)
	}
	var msg []byte
	var parts [][]byte
	if lend {
		msg = t.bufs.get(wire.HeaderSize)
		parts = append(t.bufs.getParts(1+t.partsOf(fs.f, fs.f.BlockCount(totalBlocks))), msg)
	} else {
		msg = t.bufs.get(wire.HeaderSize + payload)
	}
	p := msg[wire.HeaderSize:wire.HeaderSize]
	n := 0
	var err error
	if lend {
		parts, err = t.appendRuns(parts, s, fs.f, "ctx")
		n = partsLen(parts[1:])
	} else {
		err = t.eachRun(s, fs.f, "ctx", func(b int, blk []byte, layer int, kv topology.KV, off int) error {
			r := blk[off : off+run]
			at := len(p)
			p = append(p, r...)
			if sum {
				d.add(p[at:]) // while packing, the run in cache
			}
			if layer == fs.f.LayerHi-1 && kv == topology.V {
				t.yield() // see Prefill: let woken ranks run between blocks
			}
			n += len(r)
			return nil
		})
	}
	if err == nil && n != payload {
		err = fmt.Errorf("fragment %s packed %d bytes, expected %d", fs.f, n, payload)
	}
	if err != nil {
		t.bufs.put(msg)
		t.bufs.putParts(parts)
		return err
	}
	if corrupt {
		p[t.corruptOffset(fs.f, fs.f.BlockCount(totalBlocks), payload, corruptAt)] ^= 0xFF // after the digest: corrupted on the way
	}
	h := wire.Header{Kind: wire.KindFragment, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank),
		LayerLo: uint16(fs.f.LayerLo), LayerHi: uint16(fs.f.LayerHi), HeadLo: uint16(fs.f.HeadLo), HeadHi: uint16(fs.f.HeadHi),
		BlockMod: uint16(fs.f.BlockMod), BlockRem: uint16(fs.f.BlockRem), BlockCount: uint32(totalBlocks),
		PayloadLen: uint32(payload)}
	if sum {
		h.Flags = wire.FlagDigestFollows
	}
	// The payload is already in place after the header (or lent): write
	// the header in front of it instead of copying the payload again.
	if err := h.Put(msg[:wire.HeaderSize]); err != nil {
		t.bufs.put(msg)
		t.bufs.putParts(parts)
		return fmt.Errorf("fragment header: %w", err)
	}
	if t.progress != nil && t.notify == nil {
		// Bytes move only while both sides call into the backend: tell
		// the receiver to drive it now (until then it need not spin).
		if err := t.sendControl(fs.peer, wire.Header{Kind: wire.KindSending, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank)}); err != nil {
			t.bufs.put(msg)
			t.bufs.putParts(parts)
			return err
		}
	}
	var req comm.Request
	switch {
	case lend && t.lender != nil:
		req, err = t.lender.IsendParts(parts, fs.peer, fs.dataTag)
	case lend:
		req, err = t.vector.IsendParts(parts, fs.peer, fs.dataTag)
	default:
		req, err = t.cfg.World.Isend(msg, fs.peer, fs.dataTag)
	}
	if err != nil {
		t.bufs.put(msg)
		t.bufs.putParts(parts)
		return fmt.Errorf("send fragment to world rank %d: %w", fs.peer, err)
	}
	fs.msg, fs.parts, fs.req, fs.posted, fs.payload = msg, parts, req, true, payload
	s.bytes += int64(payload)
	t.stats.BytesSent += int64(payload)
	if s.state < StateTransferring {
		s.state = StateTransferring
	}
	if sum {
		// The digest follows the bytes (sendDigest, once every fragment
		// that can leave now has: the receivers copy while this rank
		// hashes). Packed runs were hashed while packing.
		fs.digest, fs.digestDue, fs.digestLent = d, true, lend
	}
	return nil
}

// sendDigest sends fragment fs's digest to its GEN peer, hashing the runs
// where they lie first when they were lent (sent from the blocks).
func (t *Transceiver) sendDigest(s *session, fs *fragState) error {
	fs.digestDue = false
	if t.cfg.Faults != nil && t.cfg.Faults.DropDigest[s.req.ID] {
		return nil
	}
	f := fs.f
	if fs.digestLent {
		run := t.shard.RunBytes(f.HeadLo, f.HeadHi)
		d := newDigest(s.req.ID, f)
		if err := t.eachRun(s, f, "ctx", func(_ int, blk []byte, _ int, _ topology.KV, off int) error {
			d.add(blk[off : off+run])
			return nil
		}); err != nil {
			return err
		}
		fs.digest = d
	}
	return t.sendControl(fs.peer, wire.Header{Kind: wire.KindDigest, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank),
		LayerLo: uint16(f.LayerLo), LayerHi: uint16(f.LayerHi), HeadLo: uint16(f.HeadLo), HeadHi: uint16(f.HeadHi),
		BlockMod: uint16(f.BlockMod), BlockRem: uint16(f.BlockRem), BlockCount: uint32(t.cfg.Model.Blocks(s.req.Tokens)),
		Digest: uint64(fs.digest)})
}

// corruptOffset is the payload byte a corrupt fault at c flips in
// fragment f of nb blocks (payload bytes in all), in wire order: blocks,
// then layers, K then V, then heads [HeadLo, HeadHi) of every token.
func (t *Transceiver) corruptOffset(f topology.Fragment, nb, payload int, c CorruptAt) int {
	if !c.At {
		return payload / 2
	}
	pick := func(last bool, n int) int {
		if last {
			return n - 1
		}
		return 0
	}
	nl, nh := f.LayerHi-f.LayerLo, f.HeadHi-f.HeadLo
	tpb, hb := t.cfg.Model.TokensPerBlock, t.cfg.Model.HeadBytes()
	run := (pick(c.LastBlock, nb)*nl + pick(c.LastLayer, nl)) * 2
	if c.V {
		run++
	}
	return run*t.shard.RunBytes(f.HeadLo, f.HeadHi) + (pick(c.LastHead, nh)*tpb+pick(c.LastToken, tpb))*hb + pick(c.LastToken, hb)
}

// postReceive posts the receive of fragment fs: a loan where the backend
// lends bytes, else a buffer for the whole message.
func (t *Transceiver) postReceive(s *session, fs *fragState) error {
	if t.lender != nil {
		l, err := t.lender.IrecvLoan(fs.peer, fs.dataTag)
		if err != nil {
			return err
		}
		fs.loan, fs.req = l, l
		return nil
	}
	if t.vector != nil {
		// Straight into the destination blocks; checked there once the
		// message is in (acceptFragment, in place).
		fs.msg = t.bufs.get(wire.HeaderSize)
		nb := fs.f.BlockCount(t.cfg.Model.Blocks(s.req.Tokens))
		parts, err := t.appendRuns(append(t.bufs.getParts(1+t.partsOf(fs.f, nb)), fs.msg), s, fs.f, "gen")
		var q comm.Request
		if err == nil {
			q, err = t.vector.IrecvParts(parts, fs.peer, fs.dataTag)
		}
		if err != nil {
			t.bufs.put(fs.msg)
			t.bufs.putParts(parts)
			fs.msg = nil
			return err
		}
		fs.req, fs.parts = q, parts
		return nil
	}
	fs.msg = t.bufs.get(wire.HeaderSize + fs.payload)
	q, err := t.cfg.World.Irecv(fs.msg, fs.peer, fs.dataTag)
	if err != nil {
		t.bufs.put(fs.msg)
		fs.msg = nil
		return err
	}
	fs.req = q
	return nil
}

// received is what a completed fragment receive holds, and frees it once
// read: the loan goes back to the sender, the buffer to the pool.
func (t *Transceiver) received(fs *fragState, st comm.Status) (parts [][]byte, free func()) {
	if fs.loan != nil {
		l := fs.loan
		return l.Parts(), func() { l.Release(); fs.loan = nil }
	}
	msg := fs.msg
	if t.vector != nil {
		parts := fs.parts
		// A message shorter than a header fills only part of the recycled
		// header buffer: hand over what arrived (DecodeHeader names it).
		return [][]byte{msg[:min(st.Len, wire.HeaderSize)]}, func() { t.bufs.put(msg); t.bufs.putParts(parts); fs.msg, fs.parts = nil, nil }
	}
	return [][]byte{msg[:st.Len]}, func() { t.bufs.put(msg); fs.msg = nil }
}

// appendRuns appends fragment f's runs of s's blocks to parts (with
// appendRun), in wire order (eachRun's): in each block, the runs of its
// (layer, K/V) pairs, one stride apart. Where the fragment holds every
// head of this rank's shard they lie back to back and go as one.
func (t *Transceiver) appendRuns(parts [][]byte, s *session, f topology.Fragment, side string) ([][]byte, error) {
	run := t.shard.RunBytes(f.HeadLo, f.HeadHi)
	stride := t.shard.RunBytes(t.shard.HeadLo, t.shard.HeadHi) // from one (layer, K/V) to the next
	runs := 2 * (f.LayerHi - f.LayerLo)
	if run == stride {
		run, runs = runs*run, 1 // the block's runs back to back: one
	}
	off := t.shard.Offset(f.LayerLo, topology.K, f.HeadLo, 0)
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	for b := f.BlockRem; b < totalBlocks; b += f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return parts, fmt.Errorf("fragment %s covers block %d that %s rank %d does not hold", f, b, side, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		for r := range runs {
			at := off + r*stride
			parts = appendRun(parts, blk[at:at+run])
		}
	}
	return parts, nil
}

// partsOf is how many parts appendRuns makes, at most, of fragment f's nb
// blocks: one a block where the fragment holds every head of the shard,
// one a (block, layer, K/V) otherwise.
func (t *Transceiver) partsOf(f topology.Fragment, nb int) int {
	if f.HeadLo == t.shard.HeadLo && f.HeadHi == t.shard.HeadHi {
		return nb
	}
	return nb * 2 * (f.LayerHi - f.LayerLo)
}

func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// appendRun appends r to parts, or extends the last part when r starts
// where it ends (adjacent runs in one block, adjacent blocks in the pool):
// fewer, larger parts for the backend. parts[0], the header, is never
// extended. Runs come only from Pool.Block, and a pool's storage is one
// allocation (kvpool.Pool.data): a pool split into chunks would need this to
// stop at a chunk's end.
func appendRun(parts [][]byte, r []byte) [][]byte {
	if n := len(parts); n > 1 && len(r) > 0 && len(parts[n-1]) > 0 {
		last := parts[n-1]
		end := uintptr(unsafe.Pointer(unsafe.SliceData(last))) + uintptr(len(last)) // compared, never dereferenced
		if end == uintptr(unsafe.Pointer(unsafe.SliceData(r))) {
			// Both lie in the pool's one allocation, so one slice over
			// both is memory the pool owns.
			parts[n-1] = unsafe.Slice(unsafe.SliceData(last), len(last)+len(r))
			return parts
		}
	}
	return append(parts, r)
}

// acceptFragment checks a received fragment's header against what was
// expected and copies its runs into the destination blocks, each in one
// pass with the check Config.Verify asks for.
func (t *Transceiver) acceptFragment(s *session, fs *fragState, parts [][]byte, received int) error {
	in := partReader{parts: parts}
	f := fs.f
	hb, ok := in.next(wire.HeaderSize)
	if !ok {
		return fmt.Errorf("fragment from ctx rank %d: %w: truncated header: %d bytes", f.CtxRank, wire.ErrMalformed, in.size())
	}
	h, err := wire.DecodeHeader(hb)
	if err != nil {
		return fmt.Errorf("fragment from ctx rank %d: %w", f.CtxRank, err)
	}
	if h.Kind != wire.KindFragment || request.ID(h.RequestID) != s.req.ID || int(h.LayerLo) != f.LayerLo || int(h.LayerHi) != f.LayerHi ||
		int(h.HeadLo) != f.HeadLo || int(h.HeadHi) != f.HeadHi || int(h.BlockMod) != f.BlockMod || int(h.BlockRem) != f.BlockRem {
		return fmt.Errorf("fragment from ctx rank %d: header %+v does not match the expected %s of request %d", f.CtxRank, h, f, s.req.ID)
	}
	got := in.size()
	if t.vector != nil {
		got = received - wire.HeaderSize // the payload went straight into the blocks
	}
	if got != fs.payload || int(h.PayloadLen) != got {
		return fmt.Errorf("fragment from ctx rank %d: %d payload bytes (header says %d), expected %d", f.CtxRank, got, h.PayloadLen, fs.payload)
	}
	sum := t.cfg.Verify == VerifyChecksum
	if flagged := h.Flags&wire.FlagDigestFollows != 0; flagged != sum {
		return fmt.Errorf("fragment from ctx rank %d: payload digest sent %v, but this rank verifies %s (every rank must use the same --verify)",
			f.CtxRank, flagged, t.cfg.Verify)
	}
	t.stats.BytesReceived += int64(fs.payload)
	s.bytes += int64(fs.payload)
	var d digest
	if sum {
		d = newDigest(s.req.ID, f)
	}
	inPlace := t.vector != nil // the payload went straight into the blocks
	if t.cfg.Verify == VerifyFull && sampledGrid(t.cfg.Model) {
		err = t.acceptSampled(s, f, &in, inPlace)
	} else {
		err = t.acceptRuns(s, f, &in, inPlace, &d)
	}
	if err != nil {
		return err
	}
	switch {
	case sum:
		// Verified once the sender's digest is here too (digestArrived).
		fs.hash, fs.awaitDigest = d, true
	case t.cfg.Verify == VerifyFull:
		t.verifiedFragment(s, fs)
	}
	return nil
}

// acceptRuns copies (unless inPlace) and checks fragment f's runs one at
// a time, as Config.Verify asks, adding them to d for VerifyChecksum (a
// sampled cache that holds the lane grid goes to acceptSampled).
func (t *Transceiver) acceptRuns(s *session, f topology.Fragment, in *partReader, inPlace bool, d *digest) error {
	run := t.shard.RunBytes(f.HeadLo, f.HeadHi)
	hbytes, tpb := t.cfg.Model.HeadBytes(), t.cfg.Model.TokensPerBlock
	sum := t.cfg.Verify == VerifyChecksum
	return t.eachRun(s, f, "gen", func(b int, blk []byte, layer int, kv topology.KV, off int) error {
		dst := blk[off : off+run]
		var src []byte
		if !inPlace {
			src, _ = in.next(run)
		}
		switch t.cfg.Verify {
		case VerifyFull:
			var head, tok int
			var ok bool
			if inPlace {
				head, tok, ok = checkRun(dst, hbytes, uint64(s.req.ID), layer, kv, f.HeadLo, f.HeadHi, tpb, b*tpb, false)
			} else {
				head, tok, ok = copyCheckRun(dst, src, hbytes, uint64(s.req.ID), layer, kv, f.HeadLo, f.HeadHi, tpb, b*tpb, false)
			}
			if !ok {
				return fmt.Errorf("request %d block %d from ctx rank %d: layer %d %v head %d token %d of the block (request token %d) does not hold the expected bytes",
					s.req.ID, b, f.CtxRank, layer, kv, head, tok, b*tpb+tok)
			}
		default:
			if !inPlace {
				copy(dst, src)
			}
			if sum {
				d.add(dst) // just copied: in cache
			}
		}
		if layer == f.LayerHi-1 && kv == topology.V {
			t.yield() // see Prefill: let woken ranks run between blocks
		}
		return nil
	})
}

// acceptSampled copies (unless inPlace) and checks fragment f of a
// sampled KV cache (heads shorter than a word). The K runs of a block's
// layers, and then its V runs, are each one lane grid (Pattern), their
// runs two apart in the block; the sender's runs are taken in one call
// where they arrived back to back, else a run at a time.
func (t *Transceiver) acceptSampled(s *session, f topology.Fragment, in *partReader, inPlace bool) error {
	m := t.cfg.Model
	hb, tpb := m.HeadBytes(), m.TokensPerBlock
	run := t.shard.RunBytes(f.HeadLo, f.HeadHi)
	stride := t.shard.RunBytes(t.shard.HeadLo, t.shard.HeadHi) // from one (layer, K/V) to the next in a GEN block
	layers := f.LayerHi - f.LayerLo
	req := uint64(s.req.ID)
	totalBlocks := m.Blocks(s.req.Tokens)
	for b := f.BlockRem; b < totalBlocks; b += f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return fmt.Errorf("fragment %s covers block %d that gen rank %d does not hold", f, b, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		at := t.shard.Offset(f.LayerLo, topology.K, f.HeadLo, 0)
		var src []byte // the block's runs, back to back
		if !inPlace {
			var ok bool
			if src, ok = in.contiguous(2 * layers * run); !ok {
				src = nil
			}
		}
		for kv := topology.K; kv <= topology.V; kv++ {
			g := shortGrid(hb, req, f.LayerLo, kv, f.HeadLo, f.HeadHi, tpb, b*tpb, layers)
			g.RunStep *= 2 // (layer, K) to (layer+1, K)
			dst := blk[at+int(kv)*stride:]
			bad := -1
			switch {
			case inPlace:
				bad = wordseq.CheckGrid(dst, 2*stride, g)
			case src != nil:
				bad = wordseq.CopyCheckGrid(dst, 2*stride, src[int(kv)*run:], 2*run, g)
			}
			if bad >= 0 {
				i := bad % g.N
				return fmt.Errorf("request %d block %d from ctx rank %d: layer %d %v head %d token %d of the block (request token %d) does not hold the expected bytes",
					s.req.ID, b, f.CtxRank, f.LayerLo+bad/g.N, kv, f.HeadLo+i/tpb, i%tpb, b*tpb+i%tpb)
			}
		}
		if !inPlace && src == nil {
			// The sender's runs came apart: a (layer, K/V) at a time.
			for r := range 2 * layers {
				g := shortGrid(hb, req, f.LayerLo+r/2, topology.KV(r%2), f.HeadLo, f.HeadHi, tpb, b*tpb, 1)
				one, _ := in.next(run)
				if bad := wordseq.CopyCheckGrid(blk[at+r*stride:], 0, one, 0, g); bad >= 0 {
					return fmt.Errorf("request %d block %d from ctx rank %d: layer %d %v head %d token %d of the block (request token %d) does not hold the expected bytes",
						s.req.ID, b, f.CtxRank, f.LayerLo+r/2, topology.KV(r%2), f.HeadLo+bad/tpb, bad%tpb, b*tpb+bad%tpb)
				}
			}
		}
		t.yield() // see Prefill: let woken ranks run between blocks
	}
	return nil
}

// verifiedFragment counts a fragment's payload as verified.
func (t *Transceiver) verifiedFragment(s *session, fs *fragState) {
	s.verified += int64(fs.payload)
	t.stats.BytesVerified += int64(fs.payload)
}

// compareDigest settles a fragment whose bytes were hashed on arrival
// once the sender's digest is here as well: verified when they are
// equal, a failed request (naming both) when not. It reports whether the
// fragment was settled; the caller acknowledges it.
func (t *Transceiver) compareDigest(s *session, fs *fragState) bool {
	if !fs.awaitDigest || !fs.haveDigest {
		return false
	}
	fs.awaitDigest = false
	if fs.hash != fs.digest {
		fs.digestErr = fmt.Sprintf("request %d fragment from ctx rank %d: payload digest %#016x, the sender's %#016x",
			s.req.ID, fs.f.CtxRank, uint64(fs.hash), uint64(fs.digest))
		return true
	}
	t.verifiedFragment(s, fs)
	return true
}

// partReader reads a message given as parts, in order.
type partReader struct {
	parts   [][]byte
	cur     []byte
	scratch []byte
}

// size is the number of bytes left.
func (r *partReader) size() int {
	n := len(r.cur)
	for _, p := range r.parts {
		n += len(p)
	}
	return n
}

// contiguous returns the next n bytes when they lie in one part (a view,
// consumed), false otherwise (nothing consumed).
func (r *partReader) contiguous(n int) ([]byte, bool) {
	for len(r.cur) == 0 && len(r.parts) > 0 {
		r.cur, r.parts = r.parts[0], r.parts[1:]
	}
	if len(r.cur) < n {
		return nil, false
	}
	b := r.cur[:n]
	r.cur = r.cur[n:]
	return b, true
}

// next returns the next n bytes: a view where they lie in one part, a
// copy where they straddle parts; false if fewer than n are left.
func (r *partReader) next(n int) ([]byte, bool) {
	for len(r.cur) == 0 && len(r.parts) > 0 {
		r.cur, r.parts = r.parts[0], r.parts[1:]
	}
	if len(r.cur) >= n {
		b := r.cur[:n]
		r.cur = r.cur[n:]
		return b, true
	}
	if r.size() < n {
		return nil, false
	}
	r.scratch = r.scratch[:0]
	for len(r.scratch) < n {
		for len(r.cur) == 0 {
			r.cur, r.parts = r.parts[0], r.parts[1:]
		}
		k := min(n-len(r.scratch), len(r.cur))
		r.scratch = append(r.scratch, r.cur[:k]...)
		r.cur = r.cur[k:]
	}
	return r.scratch, true
}
