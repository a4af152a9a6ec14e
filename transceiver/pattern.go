package transceiver

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/transceiver/internal/wordseq"

	"github.com/rankrun/rankrun/topology"
)

// Pattern is the deterministic content of the KV cache: the HeadBytes bytes
// of (request, layer, K/V, head, token) are a function of those five values
// only, so any receiver can verify what it got without the sender's help.
//
// A head of 8 bytes or more holds little-endian words seed, seed+step,
// ... from a seed mixed from all five (patternSeed). A head shorter than a
// word is a sampled KV cache (--kv-sample: one element of each head by
// default in simulation), whose bytes exist to prove where each (request,
// block, layer, K/V, head, token) lands. Where its lanes are 2 bytes or
// more and a block's KVHeads*TokensPerBlock lanes of one (layer, K/V) fit
// in a lane's values (sampledGrid: bf16's 2 bytes hold 65536), it holds
// the low HeadBytes bytes of an arithmetic sequence over its block
// (shortLane):
//
//	mix(request, block) + (2*layer + kv)*shortRunStep + (head*tpb + token%tpb)*shortStep
//
// so the (head, token) lanes of one (layer, K/V) of a block run up by
// shortStep and each (layer, K/V) starts shortRunStep further: a lane
// grid (wordseq.Grid), filled and checked a word of lanes at a time with
// no per-lane work but an add. Both steps are odd, so a value read from
// another lane of the same (layer, K/V) (another head or token) or from
// the same lane of another of fewer than 2^(8*HeadBytes) (layer, K/V)
// runs differs from the one expected there; a value from another block or
// request differs in the mixed start (one chance in 2^(8*HeadBytes) a
// block that it does not); and shortRunStep is chosen so that a read off
// by both a run and a lane aliases only far away (off by at most 16 runs:
// 3843 lanes or more; at most 256: 205 or more, for 2-byte lanes). Other
// short heads (1-byte lanes; more lanes than their values) hold the low
// HeadBytes bytes of patternSeed, a mixed value a segment, checked a
// segment at a time.
func patternSeed(req uint64, layer int, kv topology.KV, head, token int) uint64 {
	return patternMix(patternBase(req, layer, kv, head) ^ uint64(token))
}

// patternBase is the part of a seed that the tokens of one head share.
func patternBase(req uint64, layer int, kv topology.KV, head int) uint64 {
	return req*0x9E3779B97F4A7C15 ^ uint64(layer)<<40 ^ uint64(kv)<<39 ^ uint64(head)<<24
}

// patternMix is the splitmix64 finaliser.
func patternMix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

const patternStep = 0xD6E8FEB86659FD93

// littleEndian: the machine stores words as the pattern defines them, so
// aligned segments can be filled and checked a word at a time.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// words views seg as words when that matches the byte-defined pattern
// (little-endian machine, 8-byte aligned start); nil otherwise.
func words(seg []byte) []uint64 {
	if !littleEndian || len(seg) < 8 || uintptr(unsafe.Pointer(&seg[0]))&7 != 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&seg[0])), len(seg)/8)
}

// fillSegment writes the pattern of one (request, layer, kv, head, token)
// into seg: little-endian words seed, seed+step, seed+2*step, ...
func fillSegment(seg []byte, seed uint64) {
	w := seed
	i := 0
	if ws := words(seg); ws != nil {
		seeds := [1]uint64{w}
		wordseq.Fill(ws, len(ws), seeds[:], patternStep)
		w += uint64(len(ws)) * patternStep
		i = len(ws) * 8
	} else {
		for ; i+8 <= len(seg); i += 8 {
			binary.LittleEndian.PutUint64(seg[i:], w)
			w += patternStep
		}
	}
	for j := 0; i < len(seg); i, j = i+1, j+1 {
		seg[i] = byte(w >> (8 * j))
	}
}

// checkSegment reports whether seg holds the pattern for seed.
func checkSegment(seg []byte, seed uint64) bool {
	w := seed
	i := 0
	if ws := words(seg); ws != nil {
		seeds := [1]uint64{w}
		if !wordseq.Check(ws, len(ws), seeds[:], patternStep) {
			return false
		}
		w += uint64(len(ws)) * patternStep
		i = len(ws) * 8
	} else {
		for ; i+8 <= len(seg); i += 8 {
			if binary.LittleEndian.Uint64(seg[i:]) != w {
				return false
			}
			w += patternStep
		}
	}
	for j := 0; i < len(seg); i, j = i+1, j+1 {
		if seg[i] != byte(w>>(8*j)) {
			return false
		}
	}
	return true
}

// FillBlock writes the KV pattern of request req into block, which holds
// request block index blockIdx of shard s. This is the "prefill" of the
// compute model: it makes every byte a CTX rank will send checkable.
func FillBlock(block []byte, s topology.Shard, req uint64, blockIdx int) {
	m := s.Model
	if hb := m.HeadBytes(); sampledGrid(m) {
		// The block's (layer, K/V) runs lie back to back: one grid.
		tpb := m.TokensPerBlock
		g := shortGrid(hb, req, s.LayerLo, topology.K, s.HeadLo, s.HeadHi, tpb, blockIdx*tpb, 2*s.Layers())
		wordseq.FillGrid(block, 0, g)
		return
	}
	run := s.RunBytes(s.HeadLo, s.HeadHi)
	for layer := s.LayerLo; layer < s.LayerHi; layer++ {
		for kv := topology.K; kv <= topology.V; kv++ {
			off := s.Offset(layer, kv, s.HeadLo, 0)
			runPattern(opFill, block[off:off+run], nil, m.HeadBytes(), req, layer, kv, s.HeadLo, s.HeadHi, m.TokensPerBlock, blockIdx*m.TokensPerBlock, false)
		}
	}
}

// VerifyBlock checks that block holds the pattern of request req for the
// given layers and heads of request block blockIdx (shard s's layout); it
// returns the first mismatch as (layer, kv, head, token, false).
func VerifyBlock(block []byte, s topology.Shard, req uint64, blockIdx, layerLo, layerHi, headLo, headHi int) (int, topology.KV, int, int, bool) {
	if headLo >= headHi {
		return 0, 0, 0, 0, true
	}
	if headLo < s.HeadLo || headHi > s.HeadHi {
		panic(fmt.Sprintf("transceiver: VerifyBlock of heads [%d,%d) outside shard heads [%d,%d)", headLo, headHi, s.HeadLo, s.HeadHi))
	}
	m := s.Model
	if hb := m.HeadBytes(); sampledGrid(m) && layerLo < layerHi {
		tpb := m.TokensPerBlock
		g := shortGrid(hb, req, layerLo, topology.K, headLo, headHi, tpb, blockIdx*tpb, 2*(layerHi-layerLo))
		off := s.Offset(layerLo, topology.K, headLo, 0)
		if bad := wordseq.CheckGrid(block[off:], s.RunBytes(s.HeadLo, s.HeadHi), g); bad >= 0 {
			r, i := bad/g.N, bad%g.N
			return layerLo + r/2, topology.KV(r % 2), headLo + i/tpb, i % tpb, false
		}
		return 0, 0, 0, 0, true
	}
	run := s.RunBytes(headLo, headHi)
	for layer := layerLo; layer < layerHi; layer++ {
		for kv := topology.K; kv <= topology.V; kv++ {
			off := s.Offset(layer, kv, headLo, 0)
			if head, t, ok := checkRun(block[off:off+run], m.HeadBytes(), req, layer, kv, headLo, headHi, m.TokensPerBlock, blockIdx*m.TokensPerBlock, false); !ok {
				return layer, kv, head, t, false
			}
		}
	}
	return 0, 0, 0, 0, true
}

// Prefill writes the KV pattern of request id into the blocks it holds in
// this rank's pool (allocated by admission), as its shard lays them out:
// the rank's j-th block of the request is request block j*CP + CPIndex.
func (t *Transceiver) Prefill(id request.ID) {
	pool, s := t.cfg.Pool, t.shard
	for j, b := range pool.Blocks(id) {
		FillBlock(pool.Block(b), s, uint64(id), j*s.CP+s.CPIndex)
		t.yield()
	}
}

// A run is heads [headLo, headHi) of tpb tokens, hb bytes each, the
// first token being request token token0: segment (head, tok) holds the
// pattern of (req, layer, kv, head, token0+tok) at ((head-headLo)*tpb+tok)*hb.

// copyCheckRun copies src into dst (one run) and checks, in the same pass,
// that every segment holds its pattern. On a mismatch it returns that
// head and token (within the block) with ok false, and dst may hold only
// part of src.
func copyCheckRun(dst, src []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int, grid bool) (head, tok int, ok bool) {
	return runPattern(opCopyCheck, dst[:len(src)], src, hb, req, layer, kv, headLo, headHi, tpb, token0, grid)
}

// checkRun is copyCheckRun's check without the copy: the run is already
// where it belongs (received straight into the blocks).
func checkRun(run []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int, grid bool) (head, tok int, ok bool) {
	return runPattern(opCheck, run, nil, hb, req, layer, kv, headLo, headHi, tpb, token0, grid)
}

// patternOp is what runPattern does to a run.
type patternOp uint8

const (
	opFill      patternOp = iota // write the pattern into dst
	opCheck                      // check dst holds it
	opCopyCheck                  // copy src into dst, checking src holds it
)

// seedBatch is how many segments' seeds one kernel call takes: a stack
// array, so that no call allocates.
const seedBatch = 64

// runPattern does op to a run a head at a time: the seeds of up to
// seedBatch tokens, then one wordseq call over their segments (vectorised
// where the machine can). Segments shorter than a word that hold the lane
// grid (grid: sampledGrid of the model) go to runPatternShort; others that
// are not whole words, or a run not word-aligned, go a segment at a time. A failed
// check is located by checking the batch's segments one by one.
func runPattern(op patternOp, dst, src []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int, grid bool) (head, tok int, ok bool) {
	if grid && hb > 0 && hb < 8 {
		return runPatternShort(op, dst, src, hb, req, layer, kv, headLo, headHi, tpb, token0)
	}
	dw, sw := words(dst), words(src)
	if hb%8 != 0 || dw == nil || (op == opCopyCheck && sw == nil) {
		return runPatternSegments(op, dst, src, hb, req, layer, kv, headLo, headHi, tpb, token0)
	}
	nw := hb / 8
	var seeds [seedBatch]uint64
	k := 0 // the batch's first word
	for head = headLo; head < headHi; head++ {
		for t0 := 0; t0 < tpb; t0 += seedBatch {
			batch := seeds[:min(seedBatch, tpb-t0)]
			base, tok0 := patternBase(req, layer, kv, head), uint64(token0+t0)
			for j := range batch {
				batch[j] = patternMix(base ^ (tok0 + uint64(j)))
			}
			span := len(batch) * nw
			ok = true
			switch op {
			case opFill:
				wordseq.Fill(dw[k:k+span], nw, batch, patternStep)
			case opCheck:
				ok = wordseq.Check(dw[k:k+span], nw, batch, patternStep)
			case opCopyCheck:
				ok = wordseq.CopyCheck(dw[k:k+span], sw[k:k+span], nw, batch, patternStep)
			}
			if !ok {
				for j, seed := range batch {
					if at := (k + j*nw) * 8; !checkSegment(dst[at:at+hb], seed) {
						return head, t0 + j, false
					}
				}
				return head, t0, false // the kernel and checkSegment disagree: still a mismatch
			}
			k += span
		}
	}
	return 0, 0, true
}

// runPatternSegments is runPattern a segment at a time, for runs the word
// kernels cannot take.
func runPatternSegments(op patternOp, dst, src []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int) (head, tok int, ok bool) {
	if op == opCopyCheck {
		copy(dst, src)
	}
	for head = headLo; head < headHi; head++ {
		for tok = range tpb {
			at := ((head-headLo)*tpb + tok) * hb
			seed := patternSeed(req, layer, kv, head, token0+tok)
			if op == opFill {
				fillSegment(dst[at:at+hb], seed)
			} else if !checkSegment(dst[at:at+hb], seed) {
				return head, tok, false
			}
		}
	}
	return 0, 0, true
}

// Steps of the sampled pattern (odd: see Pattern).
const (
	shortStep    = 0x9E3779B97F4A7C15
	shortRunStep = 0xC2B2AE3D27D450C1
)

// sampledGrid reports whether m's heads hold the lane grid (Pattern):
// lanes of 2 to 7 bytes, and a (layer, K/V)'s KVHeads*TokensPerBlock
// lanes of a block no more than a lane's values.
func sampledGrid(m topology.Model) bool {
	hb := m.HeadBytes()
	return hb >= 2 && hb < 8 && m.KVHeads*m.TokensPerBlock <= 1<<(8*hb)
}

// shortGrid is the lane grid of the sampled pattern for heads [headLo,
// headHi) of runs (layer, K/V) runs from (layer, kv) on, of request req's
// block whose first token is token0.
func shortGrid(hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0, runs int) wordseq.Grid {
	start := patternMix(req*0x9E3779B97F4A7C15^uint64(token0)) + uint64(2*layer+int(kv))*shortRunStep + uint64(headLo*tpb)*shortStep
	return wordseq.Grid{W: hb, N: (headHi - headLo) * tpb, Runs: runs, Start: start, Step: shortStep, RunStep: shortRunStep}
}

// shortLane is the sampled pattern's value of token t of head in the
// block of request req whose first token is token0 (its low HeadBytes
// bytes count): the definition, lane by lane, for tests.
func shortLane(hb int, req uint64, layer int, kv topology.KV, head, tpb, token0, t int) uint64 {
	return shortGrid(hb, req, layer, kv, head, head+1, tpb, token0, 1).Lane(0, t)
}

// runPatternShort is runPattern for segments shorter than a word: one
// run of the lane grid.
func runPatternShort(op patternOp, dst, src []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int) (head, tok int, ok bool) {
	g := shortGrid(hb, req, layer, kv, headLo, headHi, tpb, token0, 1)
	bad := -1
	switch op {
	case opFill:
		wordseq.FillGrid(dst, 0, g)
	case opCheck:
		bad = wordseq.CheckGrid(dst, 0, g)
	case opCopyCheck:
		bad = wordseq.CopyCheckGrid(dst, 0, src, 0, g)
	}
	if bad < 0 {
		return 0, 0, true
	}
	return headLo + bad/tpb, bad % tpb, false
}
