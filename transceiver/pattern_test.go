package transceiver

import (
	"encoding/binary"
	"testing"

	"github.com/rankrun/rankrun/topology"
)

// The word-at-a-time path and the byte path agree on every alignment and
// length, and a single flipped byte anywhere is caught.
func TestPatternFastPathMatchesBytePath(t *testing.T) {
	buf := make([]byte, 300)
	for off := range 9 {
		for _, n := range []int{0, 1, 7, 8, 9, 64, 127, 128, 130} {
			seg := buf[off : off+n]
			fillSegment(seg, 0xABCDEF)
			w := uint64(0xABCDEF)
			for i := 0; i < n; i++ {
				if i%8 == 0 && i > 0 {
					w += patternStep
				}
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], w)
				if seg[i] != b[i%8] {
					t.Fatalf("off %d len %d: byte %d is %#x, the pattern says %#x", off, n, i, seg[i], b[i%8])
				}
			}
			if !checkSegment(seg, 0xABCDEF) {
				t.Fatalf("off %d len %d: a filled segment does not check", off, n)
			}
			for i := range n {
				seg[i] ^= 0x10
				if checkSegment(seg, 0xABCDEF) {
					t.Fatalf("off %d len %d: flipped byte %d not caught", off, n, i)
				}
				seg[i] ^= 0x10
			}
		}
	}
}

// copyCheckRun copies a whole run and catches a flipped byte at every
// position, naming its head and token, on the word path (aligned) and the
// byte path (unaligned, or segments that are not whole words).
func TestCopyCheckRunCatchesEveryByte(t *testing.T) {
	const req, layer, headLo, headHi, tpb, token0 = 7, 3, 2, 5, 4, 8
	for _, tc := range []struct {
		name   string
		hb     int
		offset int
	}{{"words", 40, 0}, {"unaligned", 40, 3}, {"odd-segment", 13, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			n := (headHi - headLo) * tpb * tc.hb
			srcBuf := make([]byte, n+8)
			src := srcBuf[tc.offset : tc.offset+n]
			for h := headLo; h < headHi; h++ {
				for tok := range tpb {
					at := ((h-headLo)*tpb + tok) * tc.hb
					fillSegment(src[at:at+tc.hb], patternSeed(req, layer, topology.V, h, token0+tok))
				}
			}
			dst := make([]byte, n)
			if _, _, ok := copyCheckRun(dst, src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0); !ok {
				t.Fatal("a run holding the pattern does not check")
			}
			if string(dst) != string(src) {
				t.Fatal("the run was not copied")
			}
			for i := range n {
				src[i] ^= 0x01
				head, tok, ok := copyCheckRun(dst, src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0)
				src[i] ^= 0x01
				seg := i / tc.hb
				if wantHead, wantTok := headLo+seg/tpb, seg%tpb; ok || head != wantHead || tok != wantTok {
					t.Fatalf("byte %d flipped: ok %v at head %d token %d, want a mismatch at head %d token %d", i, ok, head, tok, wantHead, wantTok)
				}
			}
			// The right bytes under the wrong coordinates do not check.
			if _, _, ok := copyCheckRun(dst, src, tc.hb, req, layer, topology.K, headLo, headHi, tpb, token0); ok {
				t.Fatal("V bytes checked as K")
			}
		})
	}
}
