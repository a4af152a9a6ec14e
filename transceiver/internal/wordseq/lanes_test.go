package wordseq

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// gridShapes: lane widths on and off the word path (1, 2, 4 go a word at
// a time when a run is whole words), runs of whole words and not, one run
// and several, packed and strided, aligned and not.
func gridShapes() []struct {
	g              Grid
	stride, offset int
} {
	var out []struct {
		g              Grid
		stride, offset int
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for w := 1; w <= 7; w++ {
		for _, n := range []int{1, 3, 4, 8, 12, 16, 32, 37, 40, 64, 72} {
			for _, runs := range []int{1, 2, 5} {
				for _, gap := range []int{0, 8, 3} {
					for _, offset := range []int{0, 8, 1} {
						g := Grid{W: w, N: n, Runs: runs, Start: rng.Uint64(), Step: rng.Uint64() | 1, RunStep: rng.Uint64()}
						out = append(out, struct {
							g              Grid
							stride, offset int
						}{g, g.RunBytes() + gap, offset})
					}
				}
			}
		}
	}
	return out
}

func (g Grid) String() string {
	return fmt.Sprintf("w=%d n=%d runs=%d", g.W, g.N, g.Runs)
}

// wantGrid is the definition, byte by byte, into a buffer of the stride;
// the bytes between runs are left as they were.
func wantGrid(buf []byte, stride int, g Grid) {
	for r := range g.Runs {
		for i := range g.N {
			v := g.Lane(r, i)
			for b := range g.W {
				buf[r*stride+i*g.W+b] = byte(v >> (8 * b))
			}
		}
	}
}

func gridBuf(stride, offset int, g Grid) []byte {
	n := (g.Runs-1)*stride + g.RunBytes()
	buf := make([]byte, n+offset+8)
	for i := range buf {
		buf[i] = 0xA5
	}
	return buf[offset : offset+n]
}

// FillGrid writes what the definition says, and nothing between or past
// the runs, on and off the word path.
func TestFillGridMatchesTheDefinition(t *testing.T) {
	impls(t, testFillGrid)
}

func testFillGrid(t *testing.T) {
	for _, sh := range gridShapes() {
		got, want := gridBuf(sh.stride, sh.offset, sh.g), gridBuf(sh.stride, sh.offset, sh.g)
		FillGrid(got, sh.stride, sh.g)
		wantGrid(want, sh.stride, sh.g)
		if string(got) != string(want) {
			t.Fatalf("%v stride %d offset %d: the fill differs from the definition", sh.g, sh.stride, sh.offset)
		}
		if full := got[:cap(got)]; full[len(got)] != 0xA5 {
			t.Fatalf("%v stride %d offset %d: wrote past the last run", sh.g, sh.stride, sh.offset)
		}
	}
}

// A filled grid checks, and a flipped bit in any byte of any lane is
// caught and named by its lane, by CheckGrid and CopyCheckGrid, which
// copies every run whatever it holds and nothing between the runs.
func TestCheckGridCatchesEveryByte(t *testing.T) {
	impls(t, testCheckGrid)
}

func testCheckGrid(t *testing.T) {
	for _, sh := range gridShapes() {
		g := sh.g
		if g.Runs*g.N*g.W > 400 && sh.offset != 0 {
			continue // the aligned shapes cover the long runs
		}
		src := gridBuf(sh.stride, sh.offset, g)
		FillGrid(src, sh.stride, g)
		dst := gridBuf(g.RunBytes(), sh.offset, g)
		if bad := CheckGrid(src, sh.stride, g); bad != -1 {
			t.Fatalf("%v: a filled grid fails at lane %d", g, bad)
		}
		if bad := CopyCheckGrid(dst, 0, src, sh.stride, g); bad != -1 {
			t.Fatalf("%v: a filled grid fails the copy-check at lane %d", g, bad)
		}
		for r := range g.Runs {
			for b := range g.RunBytes() {
				at := r*sh.stride + b
				src[at] ^= 0x40
				lane := r*g.N + b/g.W
				if bad := CheckGrid(src, sh.stride, g); bad != lane {
					t.Fatalf("%v stride %d offset %d: byte %d of run %d flipped: check names lane %d, want %d", g, sh.stride, sh.offset, b, r, bad, lane)
				}
				clear(dst)
				bad := CopyCheckGrid(dst, 0, src, sh.stride, g)
				if bad != lane {
					t.Fatalf("%v stride %d offset %d: byte %d of run %d flipped: copy-check names lane %d, want %d", g, sh.stride, sh.offset, b, r, bad, lane)
				}
				for k := range g.Runs {
					if string(dst[k*g.RunBytes():(k+1)*g.RunBytes()]) != string(src[k*sh.stride:k*sh.stride+g.RunBytes()]) {
						t.Fatalf("%v: with a bad byte in run %d, run %d was not copied whole", g, r, k)
					}
				}
				src[at] ^= 0x40
			}
		}
	}
}

// The right lanes of another run, another start or another step do not
// check: the values say where they belong.
func TestCheckGridTellsRunsApart(t *testing.T) {
	impls(t, testGridRunsApart)
}

func testGridRunsApart(t *testing.T) {
	g := Grid{W: 2, N: 32, Runs: 4, Start: 0x1234, Step: 0x9E37, RunStep: 0x7F4B}
	buf := make([]byte, g.Runs*g.RunBytes())
	FillGrid(buf, 0, g)
	shifted := g
	shifted.Start += g.RunStep // runs 1.. where runs 0.. belong
	if CheckGrid(buf, 0, shifted) == -1 {
		t.Fatal("run r's lanes check as run r+1's")
	}
	shifted = g
	shifted.Start += g.Step // lanes 1.. where lanes 0.. belong
	if CheckGrid(buf, 0, shifted) == -1 {
		t.Fatal("lane i's value checks as lane i+1's")
	}
}

func TestGridPanicsOnShortBuffers(t *testing.T) {
	g := Grid{W: 2, N: 8, Runs: 3}
	for _, f := range []func(){
		func() { FillGrid(make([]byte, 47), 0, g) },
		func() { CheckGrid(make([]byte, 48), 17, g) },
		func() { CopyCheckGrid(make([]byte, 48), 0, make([]byte, 48), 15, g) },
		func() { FillGrid(make([]byte, 64), 0, Grid{W: 8, N: 1, Runs: 1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		}()
	}
	FillGrid(nil, 0, Grid{W: 2, N: 8}) // no runs: nothing to hold
}

// BenchmarkCopyCheckGrid: a sampled KV block's copy and check, against a
// plain copy of the same bytes (ratio in BENCHMARKS.md's simulation speed
// section).
func BenchmarkCopyCheckGrid(b *testing.B) {
	for _, w := range []int{1, 2, 4} {
		g := Grid{W: w, N: 64 / w, Runs: 4096, Start: 1, Step: 0x9E3779B97F4A7C15, RunStep: 0xD6E8FEB86659FD93}
		src := make([]byte, g.Runs*g.RunBytes())
		dst := make([]byte, len(src))
		FillGrid(src, 0, g)
		b.Run(fmt.Sprintf("w=%d/fill", w), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				FillGrid(dst, 0, g)
			}
		})
		b.Run(fmt.Sprintf("w=%d/copycheck", w), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if CopyCheckGrid(dst, 0, src, 0, g) != -1 {
					b.Fatal("mismatch")
				}
			}
		})
	}
	b.Run("copy", func(b *testing.B) {
		src := make([]byte, 4096*64)
		dst := make([]byte, len(src))
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			copy(dst, src)
		}
	})
}

// The lane named is the first bad one in run order, where the vector loops
// take each run's whole 32-byte chunks first and the words loops the
// tails after: run 0's tail before run 1's chunks.
func TestCheckGridNamesTheFirstBadLane(t *testing.T) {
	impls(t, func(t *testing.T) {
		g := Grid{W: 2, N: 20, Runs: 3, Start: 5, Step: 0x9E37, RunStep: 0x7F4B} // 40-byte runs: a chunk and 8 bytes
		src := make([]byte, g.Runs*g.RunBytes())
		FillGrid(src, 0, g)
		src[36] ^= 1   // run 0, lane 18: in the tail
		src[40+2] ^= 1 // run 1, lane 1: in the chunk
		if bad := CheckGrid(src, 0, g); bad != 18 {
			t.Fatalf("check names lane %d, want 18", bad)
		}
		dst := make([]byte, len(src))
		if bad := CopyCheckGrid(dst, 0, src, 0, g); bad != 18 {
			t.Fatalf("copy-check names lane %d, want 18", bad)
		}
		if string(dst) != string(src) {
			t.Fatal("not every run was copied")
		}
		src[36] ^= 1
		if bad := CheckGrid(src, 0, g); bad != 21 {
			t.Fatalf("check names lane %d, want 21 (run 1, lane 1)", bad)
		}
	})
}
