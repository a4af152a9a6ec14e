package wordseq

import (
	"fmt"
	"unsafe"
)

// Grid is a grid of short lanes: Runs runs of N lanes each, W bytes a lane
// (1 to 7), the lanes of one run back to back. Lane i of run r holds the
// low 8*W bits of Start + r*RunStep + i*Step, little-endian: an arithmetic
// sequence along each run, and from run to run. It is the shape of a
// sampled KV cache (transceiver/pattern.go): one lane a (head, token), one
// run a (layer, K/V).
//
// Where the runs lie in a buffer is the caller's: each function takes a
// stride, the bytes from one run's start to the next's (0: back to back,
// W*N). A buffer must hold (Runs-1)*stride + W*N bytes.
//
// Lanes of 1, 2 and 4 bytes in runs of whole, aligned words go a word at a
// time (each word's lanes advance together, in one 64-bit add that keeps
// lanes apart); others a lane at a time. Neither calls a function per lane.
type Grid struct {
	W, N, Runs           int
	Start, Step, RunStep uint64
}

// Lane is the value lane i of run r holds (its low 8*W bits).
func (g Grid) Lane(r, i int) uint64 {
	return (g.Start + uint64(r)*g.RunStep + uint64(i)*g.Step) & laneMask(g.W)
}

// RunBytes is the length of one run.
func (g Grid) RunBytes() int { return g.W * g.N }

// FillGrid writes grid g into buf, its runs stride bytes apart.
func FillGrid(buf []byte, stride int, g Grid) {
	stride = g.need(len(buf), stride, "FillGrid buf")
	n := g.RunBytes()
	s, ok := g.swar(buf, stride)
	if ok && s.nvec > 0 {
		raceRuns(buf, stride, g.Runs, s.nvec*32, true)
		gridFillAVX2(unsafe.SliceData(buf), stride, g.Runs, s.nvec, &s.first, &s.inc, &s.runInc, g.W)
		if s.tail == 0 {
			return
		}
	}
	base := g.Start
	x0 := s.pack(base, g.Step)
	for r := 0; r < g.Runs; r++ {
		run := buf[r*stride : r*stride+n]
		if ok {
			s.fill(asWords(run[s.done:]), s.skip(x0))
			x0 = s.next(x0)
		} else {
			g.fillLanes(run, base)
		}
		base += g.RunStep
	}
}

// CheckGrid reports the first lane of buf (runs stride bytes apart) that
// does not hold grid g's value, as r*N+i; -1 when every lane does.
func CheckGrid(buf []byte, stride int, g Grid) int {
	stride = g.need(len(buf), stride, "CheckGrid buf")
	n := g.RunBytes()
	s, ok := g.swar(buf, stride)
	vecBad := g.Runs // the first run whose vector chunks fail (Runs: none)
	if ok && s.nvec > 0 {
		raceRuns(buf, stride, g.Runs, s.nvec*32, false)
		if r := gridCheckAVX2(unsafe.SliceData(buf), stride, g.Runs, s.nvec, &s.first, &s.inc, &s.runInc, g.W); r >= 0 {
			vecBad = r
		}
	}
	base := g.Start
	x0 := s.pack(base, g.Step)
	for r := 0; r < g.Runs; r++ {
		run := buf[r*stride : r*stride+n]
		var bad bool
		switch {
		case !ok:
			bad = g.firstBad(run, base) >= 0
		case r == vecBad:
			bad = true
		case s.done < n: // the words past the vector chunks (all of them without)
			bad = !s.check(asWords(run[s.done:]), s.skip(x0))
		}
		if bad {
			return r*g.N + g.lane(run, base)
		}
		x0 = s.next(x0)
		base += g.RunStep
	}
	return -1
}

// CopyCheckGrid copies every run of src into dst, all of them whatever
// they hold, and reports CheckGrid's answer for src: one pass for what
// would be a copy and a check.
func CopyCheckGrid(dst []byte, dstStride int, src []byte, srcStride int, g Grid) int {
	dstStride = g.need(len(dst), dstStride, "CopyCheckGrid dst")
	srcStride = g.need(len(src), srcStride, "CopyCheckGrid src")
	n := g.RunBytes()
	s, ok := g.swar(src, srcStride)
	if _, okd := g.swar(dst, dstStride); !okd {
		ok = false
	}
	vecBad := g.Runs // the first run whose vector chunks fail (Runs: none)
	if ok && s.nvec > 0 {
		raceRuns(src, srcStride, g.Runs, s.nvec*32, false)
		raceRuns(dst, dstStride, g.Runs, s.nvec*32, true)
		if r := gridCopyCheckAVX2(unsafe.SliceData(dst), dstStride, unsafe.SliceData(src), srcStride, g.Runs, s.nvec, &s.first, &s.inc, &s.runInc, g.W); r >= 0 {
			vecBad = r
		}
	}
	bad := -1
	base := g.Start
	x0 := s.pack(base, g.Step)
	for r := 0; r < g.Runs; r++ {
		d, sr := dst[r*dstStride:r*dstStride+n], src[r*srcStride:r*srcStride+n]
		var runBad bool
		if ok {
			if s.done < n { // the words past the vector chunks (all of them without)
				runBad = !s.copyCheck(asWords(d[s.done:]), asWords(sr[s.done:]), s.skip(x0))
			}
			runBad = runBad || r == vecBad
			x0 = s.next(x0)
		} else {
			copy(d, sr)
			runBad = g.firstBad(sr, base) >= 0
		}
		if runBad && bad < 0 {
			bad = r*g.N + g.lane(sr, base)
		}
		base += g.RunStep
	}
	return bad
}

// lane is the first lane of a run found bad that does not hold its value:
// its first lane when none is found (the bytes changed under the check:
// still a mismatch).
func (g Grid) lane(run []byte, base uint64) int {
	return max(0, g.firstBad(run, base))
}

// need panics unless g is a grid and a buffer of have bytes holds it with
// runs stride bytes apart; it returns the stride (0 made W*N).
func (g Grid) need(have, stride int, what string) int {
	if g.W < 1 || g.W > 7 || g.N < 0 || g.Runs < 0 {
		panic(fmt.Sprintf("wordseq: %s: grid of %d runs of %d lanes of %d bytes (lanes are 1 to 7 bytes)", what, g.Runs, g.N, g.W))
	}
	if stride == 0 {
		stride = g.RunBytes()
	}
	if g.Runs == 0 {
		return stride
	}
	if stride < g.RunBytes() || have < (g.Runs-1)*stride+g.RunBytes() {
		panic(fmt.Sprintf("wordseq: %s has %d bytes, %d runs of %d bytes %d apart need %d", what, have, g.Runs, g.RunBytes(), stride, (g.Runs-1)*stride+g.RunBytes()))
	}
	return stride
}

// laneMask is the low 8*w bits.
func laneMask(w int) uint64 { return 1<<(8*w) - 1 }

// swar holds what a run of whole words needs: the lanes' top bits, and the
// advance of every lane from one word to the next (and to the fourth
// next), split into its low and top bits.
type swar struct {
	top            uint64 // each lane's top bit
	d1l, d1h       uint64 // + one word's lanes of Step
	d4l, d4h       uint64 // + four words' worth
	rl, rh         uint64 // + RunStep: from one run's first word to the next's
	per            int    // lanes a word
	mask, laneBits uint64
	// The vector loops (where the machine has them) take each run's first
	// nvec chunks of 32 bytes; the words loops the rest, from byte done of
	// each run (0 without vector loops), tail words.
	nvec, done, tail   int
	first, inc, runInc [4]uint64
}

// skip is the first word at byte done of a run whose first word is x0.
func (s *swar) skip(x0 uint64) uint64 {
	for k := 0; k < s.done/8; k += 4 {
		x0 = ((x0 &^ s.top) + s.d4l) ^ ((x0 & s.top) ^ s.d4h)
	}
	return x0
}

// swar reports whether g's runs in buf, stride bytes apart, go a word at
// a time (lanes of 1, 2 or 4 bytes, every run whole words from an aligned
// start), and if so the constants the words need.
func (g Grid) swar(buf []byte, stride int) (swar, bool) {
	if (g.W != 1 && g.W != 2 && g.W != 4) || g.RunBytes()%8 != 0 || g.N == 0 || g.Runs == 0 || stride%8 != 0 || !littleEndian ||
		uintptr(unsafe.Pointer(unsafe.SliceData(buf)))&7 != 0 {
		return swar{}, false
	}
	var top uint64
	switch g.W {
	case 1:
		top = 0x8080808080808080
	case 2:
		top = 0x8000800080008000
	default:
		top = 0x8000000080000000
	}
	per := 8 / g.W
	s := swar{top: top, per: per, mask: laneMask(g.W), laneBits: uint64(8 * g.W)}
	d1 := s.replicate(uint64(per) * g.Step)
	d4 := s.replicate(uint64(4*per) * g.Step)
	r := s.replicate(g.RunStep)
	s.d1l, s.d1h, s.d4l, s.d4h, s.rl, s.rh = d1&^top, d1&top, d4&^top, d4&top, r&^top, r&top
	if hasAVX2 && g.RunBytes() >= 32 {
		s.nvec = g.RunBytes() / 32
		s.done, s.tail = 32*s.nvec, g.RunBytes()%32
		x := s.pack(g.Start, g.Step)
		for k := range s.first {
			s.first[k] = x
			x = ((x &^ top) + s.d1l) ^ ((x & top) ^ s.d1h)
		}
		s.inc = [4]uint64{d4, d4, d4, d4}
		s.runInc = [4]uint64{r, r, r, r}
	}
	return s, true
}

// asWords views an aligned run of whole words as words.
func asWords(run []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(run))), len(run)/8)
}

// replicate puts v's low lane in every lane of a word.
func (s *swar) replicate(v uint64) uint64 {
	v &= s.mask
	var w uint64
	for k := 0; k < s.per; k++ {
		w |= v << (s.laneBits * uint64(k))
	}
	return w
}

// pack is the word whose first lane holds base, the next base+step, ...
func (s *swar) pack(base, step uint64) uint64 {
	var w uint64
	for k := 0; k < s.per; k++ {
		w |= ((base + uint64(k)*step) & s.mask) << (s.laneBits * uint64(k))
	}
	return w
}

// The word loops keep four words in flight, each advancing four words a
// step, so that no word waits for the one before it. Their constants are
// locals: stores into the run could alias a struct's fields.

// fill writes the words of a run whose first word is x0.
func (s *swar) fill(ws []uint64, x0 uint64) {
	top, d1l, d1h, d4l, d4h := s.top, s.d1l, s.d1h, s.d4l, s.d4h
	x1 := ((x0 &^ top) + d1l) ^ ((x0 & top) ^ d1h)
	x2 := ((x1 &^ top) + d1l) ^ ((x1 & top) ^ d1h)
	x3 := ((x2 &^ top) + d1l) ^ ((x2 & top) ^ d1h)
	k := 0
	for ; k+4 <= len(ws); k += 4 {
		ws[k], ws[k+1], ws[k+2], ws[k+3] = x0, x1, x2, x3
		x0 = ((x0 &^ top) + d4l) ^ ((x0 & top) ^ d4h)
		x1 = ((x1 &^ top) + d4l) ^ ((x1 & top) ^ d4h)
		x2 = ((x2 &^ top) + d4l) ^ ((x2 & top) ^ d4h)
		x3 = ((x3 &^ top) + d4l) ^ ((x3 & top) ^ d4h)
	}
	for ; k < len(ws); k++ {
		ws[k] = x0
		x0 = ((x0 &^ top) + d1l) ^ ((x0 & top) ^ d1h)
	}
}

// check reports whether ws hold the run whose first word is x0.
func (s *swar) check(ws []uint64, x0 uint64) bool {
	top, d1l, d1h, d4l, d4h := s.top, s.d1l, s.d1h, s.d4l, s.d4h
	x1 := ((x0 &^ top) + d1l) ^ ((x0 & top) ^ d1h)
	x2 := ((x1 &^ top) + d1l) ^ ((x1 & top) ^ d1h)
	x3 := ((x2 &^ top) + d1l) ^ ((x2 & top) ^ d1h)
	var bad uint64
	k := 0
	for ; k+4 <= len(ws); k += 4 {
		bad |= (ws[k] ^ x0) | (ws[k+1] ^ x1) | (ws[k+2] ^ x2) | (ws[k+3] ^ x3)
		x0 = ((x0 &^ top) + d4l) ^ ((x0 & top) ^ d4h)
		x1 = ((x1 &^ top) + d4l) ^ ((x1 & top) ^ d4h)
		x2 = ((x2 &^ top) + d4l) ^ ((x2 & top) ^ d4h)
		x3 = ((x3 &^ top) + d4l) ^ ((x3 & top) ^ d4h)
	}
	for ; k < len(ws); k++ {
		bad |= ws[k] ^ x0
		x0 = ((x0 &^ top) + d1l) ^ ((x0 & top) ^ d1h)
	}
	return bad == 0
}

// copyCheck copies src into dst (as long) and reports whether src held
// the run whose first word is x0.
func (s *swar) copyCheck(dst, src []uint64, x0 uint64) bool {
	dst = dst[:len(src)]
	top, d1l, d1h, d4l, d4h := s.top, s.d1l, s.d1h, s.d4l, s.d4h
	x1 := ((x0 &^ top) + d1l) ^ ((x0 & top) ^ d1h)
	x2 := ((x1 &^ top) + d1l) ^ ((x1 & top) ^ d1h)
	x3 := ((x2 &^ top) + d1l) ^ ((x2 & top) ^ d1h)
	var bad uint64
	k := 0
	for ; k+4 <= len(src); k += 4 {
		v0, v1, v2, v3 := src[k], src[k+1], src[k+2], src[k+3]
		dst[k], dst[k+1], dst[k+2], dst[k+3] = v0, v1, v2, v3
		bad |= (v0 ^ x0) | (v1 ^ x1) | (v2 ^ x2) | (v3 ^ x3)
		x0 = ((x0 &^ top) + d4l) ^ ((x0 & top) ^ d4h)
		x1 = ((x1 &^ top) + d4l) ^ ((x1 & top) ^ d4h)
		x2 = ((x2 &^ top) + d4l) ^ ((x2 & top) ^ d4h)
		x3 = ((x3 &^ top) + d4l) ^ ((x3 & top) ^ d4h)
	}
	for ; k < len(src); k++ {
		v := src[k]
		dst[k] = v
		bad |= v ^ x0
		x0 = ((x0 &^ top) + d1l) ^ ((x0 & top) ^ d1h)
	}
	return bad == 0
}

// next is the first word of the next run: every lane plus RunStep.
func (s *swar) next(x0 uint64) uint64 { return ((x0 &^ s.top) + s.rl) ^ ((x0 & s.top) ^ s.rh) }

// fillLanes writes a run a lane at a time, its bytes little-endian.
func (g Grid) fillLanes(run []byte, base uint64) {
	v := base
	for at := 0; at+g.W <= len(run); at += g.W {
		for b := range g.W {
			run[at+b] = byte(v >> (8 * b))
		}
		v += g.Step
	}
}

// firstBad is the first lane of run not holding its value (-1: none).
func (g Grid) firstBad(run []byte, base uint64) int {
	v := base
	for i := range g.N {
		at := i * g.W
		for b := range g.W {
			if run[at+b] != byte(v>>(8*b)) {
				return i
			}
		}
		v += g.Step
	}
	return -1
}

// littleEndian: the machine stores a word's lanes in the order the grid's
// bytes are defined, so a word at a time is the same as a lane at a time.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
