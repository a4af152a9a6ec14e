package transceiver

import (
	"encoding/binary"
	"testing"
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
