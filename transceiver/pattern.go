package transceiver

import (
	"encoding/binary"
	"runtime"
	"unsafe"

	"github.com/rankrun/rankrun/gpu"
	"github.com/rankrun/rankrun/request"

	"github.com/rankrun/rankrun/topology"
)

// Pattern is the deterministic content of the KV cache: the HeadBytes bytes
// of (request, layer, K/V, head, token) are a function of those five values
// only, so any receiver can verify what it got without the sender's help.
func patternSeed(req uint64, layer int, kv topology.KV, head, token int) uint64 {
	x := req*0x9E3779B97F4A7C15 ^ uint64(layer)<<40 ^ uint64(kv)<<39 ^ uint64(head)<<24 ^ uint64(token)
	// splitmix64 finaliser.
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
		for k := range ws {
			ws[k] = w
			w += patternStep
		}
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
		for _, v := range ws {
			if v != w {
				return false
			}
			w += patternStep
		}
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
	hb := m.HeadBytes()
	for layer := s.LayerLo; layer < s.LayerHi; layer++ {
		for kv := topology.K; kv <= topology.V; kv++ {
			for head := s.HeadLo; head < s.HeadHi; head++ {
				for t := range m.TokensPerBlock {
					off := s.Offset(layer, kv, head, t)
					fillSegment(block[off:off+hb], patternSeed(req, layer, kv, head, blockIdx*m.TokensPerBlock+t))
				}
			}
		}
	}
}

// VerifyBlock checks that block holds the pattern of request req for the
// given layers and heads of request block blockIdx (shard s's layout); it
// returns the first mismatch as (layer, kv, head, token, false).
func VerifyBlock(block []byte, s topology.Shard, req uint64, blockIdx, layerLo, layerHi, headLo, headHi int) (int, topology.KV, int, int, bool) {
	m := s.Model
	hb := m.HeadBytes()
	for layer := layerLo; layer < layerHi; layer++ {
		for kv := topology.K; kv <= topology.V; kv++ {
			for head := headLo; head < headHi; head++ {
				for t := range m.TokensPerBlock {
					off := s.Offset(layer, kv, head, t)
					if !checkSegment(block[off:off+hb], patternSeed(req, layer, kv, head, blockIdx*m.TokensPerBlock+t)) {
						return layer, kv, head, t, false
					}
				}
			}
		}
	}
	return 0, 0, 0, 0, true
}

// Prefill writes the KV pattern of request id into the blocks it holds in
// pool (allocated by admission), as shard s lays them out: the rank's j-th
// block of the request is request block j*CP + CPIndex.
func Prefill(pool *gpu.Pool, s topology.Shard, id request.ID) {
	for j, b := range pool.Blocks(id) {
		FillBlock(pool.Block(b), s, uint64(id), j*s.CP+s.CPIndex)
		// In-process, every rank shares the machine's cores: yield between
		// blocks so a rank woken by an event runs within microseconds,
		// not after the scheduler's 10 ms preemption slice.
		runtime.Gosched()
	}
}

// copyCheckRun copies src into dst (one run: heads [headLo, headHi) of
// tpb tokens, hb bytes each, the first token being request token token0)
// and checks, in the same pass, that every segment holds the pattern of
// (req, layer, kv, head, token). On a mismatch it stops and returns that
// head and token (within the block) with ok false.
func copyCheckRun(dst, src []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int) (head, tok int, ok bool) {
	dst = dst[:len(src)]
	dw, sw := words(dst), words(src)
	nw := hb / 8
	if dw == nil || sw == nil || hb%8 != 0 {
		copy(dst, src)
		return checkRun(dst, hb, req, layer, kv, headLo, headHi, tpb, token0)
	}
	k := 0
	for head = headLo; head < headHi; head++ {
		for tok = range tpb {
			if copyCheckWords(dw[k:k+nw], sw[k:k+nw], patternSeed(req, layer, kv, head, token0+tok)) != 0 {
				return head, tok, false
			}
			k += nw
		}
	}
	return 0, 0, true
}

// copyCheckWords copies src into dst and returns the OR of every word's
// difference from the pattern w, w+step, ...: zero when all match. (The
// plain loop measured faster than 2- and 4-way unrolled ones, which spill
// registers: BenchmarkCopyCheckRun.)
func copyCheckWords(dst, src []uint64, w uint64) uint64 {
	var bad uint64
	dst = dst[:len(src)] // one bounds check, not one a word
	for i, v := range src {
		dst[i] = v
		bad |= v ^ w
		w += patternStep
	}
	return bad
}

// checkRun is copyCheckRun's check without the copy: the run is already
// where it belongs (received straight into the blocks).
func checkRun(run []byte, hb int, req uint64, layer int, kv topology.KV, headLo, headHi, tpb, token0 int) (head, tok int, ok bool) {
	for head = headLo; head < headHi; head++ {
		for tok = range tpb {
			at := ((head-headLo)*tpb + tok) * hb
			if !checkSegment(run[at:at+hb], patternSeed(req, layer, kv, head, token0+tok)) {
				return head, tok, false
			}
		}
	}
	return 0, 0, true
}
