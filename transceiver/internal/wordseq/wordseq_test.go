package wordseq

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// impls runs f once on the Go loops and, where this machine has them, once
// on the vector loops.
func impls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := hasAVX2
	defer func() { hasAVX2 = saved }()
	hasAVX2 = false
	t.Run("generic", f)
	if !saved {
		t.Logf("no AVX2 in this build or on this machine: only the Go loops ran")
		return
	}
	hasAVX2 = true
	t.Run("avx2", f)
}

// want is the definition, word by word.
func want(n int, seeds []uint64, step uint64) []uint64 {
	var out []uint64
	for _, w := range seeds {
		for k := range n {
			out = append(out, w+uint64(k)*step)
		}
	}
	return out
}

// shapes: segment lengths on and off the vector loops' multiple of 8,
// from one to several segments, with odd and even steps.
var shapes = []struct{ n, segs int }{{1, 1}, {7, 3}, {8, 1}, {8, 5}, {16, 2}, {32, 16}, {40, 3}, {12, 4}}

func TestFillMatchesTheDefinition(t *testing.T) {
	impls(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, sh := range shapes {
			seeds := make([]uint64, sh.segs)
			for i := range seeds {
				seeds[i] = rng.Uint64()
			}
			step := rng.Uint64()
			dst := make([]uint64, sh.n*sh.segs+1)
			dst[len(dst)-1] = 0xFEED
			Fill(dst, sh.n, seeds, step)
			w := want(sh.n, seeds, step)
			for i := range w {
				if dst[i] != w[i] {
					t.Fatalf("n=%d segs=%d: word %d is %#x, want %#x", sh.n, sh.segs, i, dst[i], w[i])
				}
			}
			if dst[len(dst)-1] != 0xFEED {
				t.Fatalf("n=%d segs=%d: wrote past the segments", sh.n, sh.segs)
			}
		}
	})
}

// TestCheckCatchesEveryByte: a flip of any one byte of any word, in any
// segment, is caught by Check and by CopyCheck, and CopyCheck copies every
// word whatever it holds.
func TestCheckCatchesEveryByte(t *testing.T) {
	impls(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("n=%d,segs=%d", sh.n, sh.segs), func(t *testing.T) {
				seeds := make([]uint64, sh.segs)
				for i := range seeds {
					seeds[i] = rng.Uint64()
				}
				step := rng.Uint64() | 1
				src := want(sh.n, seeds, step)
				dst := make([]uint64, len(src))
				if !Check(src, sh.n, seeds, step) || !CopyCheck(dst, src, sh.n, seeds, step) {
					t.Fatal("the pattern itself fails")
				}
				for i := range src {
					for b := range 8 {
						src[i] ^= 0x80 << (8 * b)
						clear(dst)
						if Check(src, sh.n, seeds, step) {
							t.Fatalf("Check misses byte %d of word %d", b, i)
						}
						if CopyCheck(dst, src, sh.n, seeds, step) {
							t.Fatalf("CopyCheck misses byte %d of word %d", b, i)
						}
						for k := range src {
							if dst[k] != src[k] {
								t.Fatalf("CopyCheck left word %d of the destination as %#x, src holds %#x", k, dst[k], src[k])
							}
						}
						src[i] ^= 0x80 << (8 * b)
					}
				}
			})
		}
	})
}

func TestNoSegmentsIsEmpty(t *testing.T) {
	impls(t, func(t *testing.T) {
		if !Check(nil, 8, nil, 1) || !CopyCheck(nil, nil, 8, nil, 1) {
			t.Fatal("no segments must pass")
		}
		Fill(nil, 0, []uint64{1}, 1)
	})
}

func TestShortBufferPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Check of 2 segments of 8 words in 15 words did not panic")
		}
	}()
	Check(make([]uint64, 15), 8, []uint64{1, 2}, 1)
}

func BenchmarkCopyCheck(b *testing.B) {
	for _, kib := range []int{4, 256, 4096} {
		n := 32 // 256-byte segments, as a KV head of 128 two-byte elements
		segs := kib * 1024 / 8 / n
		seeds := make([]uint64, segs)
		for i := range seeds {
			seeds[i] = uint64(i) * 0x9E3779B97F4A7C15
		}
		src, dst := make([]uint64, n*segs), make([]uint64, n*segs)
		Fill(src, n, seeds, 3)
		for _, v := range []bool{false, true} {
			if v && !hasAVX2 {
				continue
			}
			name := map[bool]string{false: "generic", true: "avx2"}[v]
			b.Run(fmt.Sprintf("%dKiB/%s/copycheck", kib, name), func(b *testing.B) {
				saved := hasAVX2
				hasAVX2 = v
				defer func() { hasAVX2 = saved }()
				b.SetBytes(int64(len(src) * 8))
				for b.Loop() {
					if !CopyCheck(dst, src, n, seeds, 3) {
						b.Fatal("bad")
					}
				}
			})
			b.Run(fmt.Sprintf("%dKiB/%s/check", kib, name), func(b *testing.B) {
				saved := hasAVX2
				hasAVX2 = v
				defer func() { hasAVX2 = saved }()
				b.SetBytes(int64(len(src) * 8))
				for b.Loop() {
					if !Check(src, n, seeds, 3) {
						b.Fatal("bad")
					}
				}
			})
		}
		b.Run(fmt.Sprintf("%dKiB/copy", kib), func(b *testing.B) {
			b.SetBytes(int64(len(src) * 8))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
