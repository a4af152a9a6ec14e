package transceiver

import (
	"testing"

	"github.com/rankrun/rankrun/topology"
)

func BenchmarkCopyCheckRun(b *testing.B) {
	b.Run("hb256", func(b *testing.B) { benchCopyCheck(b, 256, 2, 16) })
	b.Run("hb2", func(b *testing.B) { benchCopyCheck(b, 2, 2, 16) })
}

func benchCopyCheck(b *testing.B, hb, heads, tpb int) {
	n := heads * tpb * hb
	src, dst := make([]byte, n), make([]byte, n)
	for h := range heads {
		for t := range tpb {
			at := (h*tpb + t) * hb
			fillSegment(src[at:at+hb], patternSeed(1, 0, topology.K, h, t))
		}
	}
	b.SetBytes(int64(n))
	for b.Loop() {
		if _, _, ok := copyCheckRun(dst, src, hb, 1, 0, topology.K, 0, heads, tpb, 0, false); !ok {
			b.Fatal("bad")
		}
	}
}
