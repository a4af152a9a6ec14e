//go:build mpi

package mpi

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/mpi/cref"
)

// The benchmarks run on every rank of the job and must make the same calls
// in the same order everywhere, so run them with a fixed count
// (-test.benchtime=Nx): ranks picking their own b.N would deadlock.
// scripts/bench-mpi.sh runs them next to the C reference (bench/ref.c),
// which measures the same loops.

func benchStart(b *testing.B) comm.Comm {
	b.Helper()
	c := testWorld.Raw()
	if err := c.Barrier(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	return c
}

// BenchmarkAllreduce1 is AllreduceInt64 of one int64.
func BenchmarkAllreduce1(b *testing.B) {
	c := benchStart(b)
	ctx := context.Background()
	in, out := []int64{int64(c.Rank())}, []int64{0}
	for range b.N {
		if err := c.AllreduceInt64(ctx, comm.Sum, in, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllgatherPair is the consensus pattern: AllgatherInt64s of 0..64
// values per rank, varying every call (counts allgather + allgatherv).
func BenchmarkAllgatherPair(b *testing.B) {
	c := benchStart(b)
	ctx := context.Background()
	vals := make([]int64, 64)
	var g comm.Gathered
	for i := range b.N {
		k := (c.Rank()*7 + i*3) % 65
		if err := c.AllgatherInt64s(ctx, vals[:k], &g); err != nil {
			b.Fatal(err)
		}
	}
}

func benchP2P(b *testing.B, size int) {
	c := benchStart(b)
	ctx := context.Background()
	buf := make([]byte, size)
	b.SetBytes(int64(size))
	r := c.Rank()
	peer := r ^ 1
	if peer >= c.Size() {
		return // the odd rank out has no partner
	}
	for range b.N {
		var q comm.Request
		var err error
		if r%2 == 0 {
			q, err = c.Isend(buf, peer, 1)
		} else {
			q, err = c.Irecv(buf, peer, 1)
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := q.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkP2P1MiB sends 1 MiB from each even rank to the next odd one.
func BenchmarkP2P1MiB(b *testing.B) { benchP2P(b, 1<<20) }

// BenchmarkP2P64MiB sends 64 MiB from each even rank to the next odd one.
func BenchmarkP2P64MiB(b *testing.B) { benchP2P(b, 64<<20) }

// BenchmarkVsC alternates chunks of the C reference loop (package cref:
// blocking MPI calls on MPI_COMM_WORLD) with chunks of the same loop on the
// Go binding, in the same processes, b.N chunks of each (half of them C
// first), and reports the median and the best of the per-chunk ratios:
// go/c is Go's time over C's for the collectives, Go's bandwidth over C's
// for point to point (go/c-bw). Load on a shared machine moves both halves
// of a chunk alike, so these ratios are far steadier than ratios of
// separate runs. ns/op counts both halves and the barriers: ignore it.
func BenchmarkVsC(b *testing.B) {
	c := testWorld.Raw()
	ctx := context.Background()
	in, out := []int64{int64(c.Rank())}, []int64{0}
	vals := make([]int64, 64)
	var g comm.Gathered
	round := 0
	goP2P := func(buf []byte) func(n int) error {
		return func(n int) error {
			peer := c.Rank() ^ 1
			if peer >= c.Size() {
				return nil
			}
			for range n {
				var q comm.Request
				var err error
				if c.Rank()%2 == 0 {
					q, err = c.Isend(buf, peer, 1)
				} else {
					q, err = c.Irecv(buf, peer, 1)
				}
				if err == nil {
					_, err = q.Wait(ctx)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, bc := range []struct {
		name  string
		chunk int
		bytes int // point to point: the metric is bandwidth
		c     func(n int)
		g     func(n int) error
	}{
		{"allreduce", 2000, 0, cref.Allreduce, func(n int) error {
			for range n {
				if err := c.AllreduceInt64(ctx, comm.Sum, in, out); err != nil {
					return err
				}
			}
			return nil
		}},
		{"allgather_pair", 2000, 0, func(n int) { cref.AllgatherPair(n, round); round += n }, func(n int) error {
			for range n {
				k := (c.Rank()*7 + round*3) % 65
				round++
				if err := c.AllgatherInt64s(ctx, vals[:k], &g); err != nil {
					return err
				}
			}
			return nil
		}},
		// The typed collectives of a user's program: float32
		// gradients allreduced at 4 KiB and 64 MiB, a 1 MiB all-to-all
		// (1 MiB sent per rank in all, split evenly among the ranks).
		{"allreduce_f32_4KiB", 1000, 0, cF32(cref.AllreduceF32, 4<<10), goF32(4<<10, func(in, out []float32) error {
			return comm.Allreduce(ctx, c, comm.Sum, in, out)
		})},
		{"allreduce_f32_64MiB", 2, 0, cF32(cref.AllreduceF32, 64<<20), goF32(64<<20, func(in, out []float32) error {
			return comm.Allreduce(ctx, c, comm.Sum, in, out)
		})},
		{"alltoall_f32_1MiB", 50, 0, cF32(func(n int, in, out cref.Buffer) { cref.AlltoallF32(n, c.Size(), in, out) }, alltoallBytes(c.Size())),
			goF32(alltoallBytes(c.Size()), func(in, out []float32) error { return comm.Alltoall(ctx, c, in, out) })},
		{"p2p_1MiB", 50, 1 << 20, nil, goP2P(make([]byte, 1<<20))},
		{"p2p_64MiB", 2, 64 << 20, nil, goP2P(make([]byte, 64<<20))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.bytes > 0 {
				cb := cref.NewBuffer(bc.bytes)
				defer cb.Free()
				bc.c = func(n int) { cref.P2P(n, cb) }
			}
			var ratios, cNs, gNs []float64
			timed := func(f func()) time.Duration {
				if err := c.Barrier(ctx); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				f()
				return time.Since(t0)
			}
			var gerr error
			for i := range b.N {
				var tc, tg time.Duration
				if i%2 == 0 {
					tc = timed(func() { bc.c(bc.chunk) })
					tg = timed(func() { gerr = bc.g(bc.chunk) })
				} else {
					tg = timed(func() { gerr = bc.g(bc.chunk) })
					tc = timed(func() { bc.c(bc.chunk) })
				}
				if gerr != nil {
					b.Fatal(gerr)
				}
				if bc.bytes > 0 {
					ratios = append(ratios, float64(tc)/float64(tg))
				} else {
					ratios = append(ratios, float64(tg)/float64(tc))
				}
				cNs = append(cNs, float64(tc.Nanoseconds())/float64(bc.chunk))
				gNs = append(gNs, float64(tg.Nanoseconds())/float64(bc.chunk))
			}
			unit := "go/c"
			best := slices.Min(ratios)
			if bc.bytes > 0 {
				unit = "go/c-bw"
				best = slices.Max(ratios)
			}
			b.ReportMetric(median(ratios), unit)
			b.ReportMetric(best, unit+"-best")
			b.ReportMetric(median(cNs), "c-ns/op")
			b.ReportMetric(median(gNs), "go-ns/op")
		})
	}
}

// cF32 runs a C loop over two C buffers of bytes each (allocated and
// filled on first use, kept for the process: a benchmark's chunks reuse
// them).
func cF32(loop func(n int, in, out cref.Buffer), bytes int) func(n int) {
	var in, out cref.Buffer
	return func(n int) {
		if in == (cref.Buffer{}) {
			in, out = cref.NewBuffer(bytes), cref.NewBuffer(bytes)
			in.FillF32()
			out.FillF32()
		}
		loop(n, in, out)
	}
}

// goF32 runs the Go loop over two float32 slices of bytes each.
func goF32(bytes int, op func(in, out []float32) error) func(n int) error {
	var in, out []float32
	return func(n int) error {
		if in == nil {
			in, out = make([]float32, bytes/4), make([]float32, bytes/4)
			for i := range in {
				in[i], out[i] = float32(i%1000), float32(i%1000)
			}
		}
		for range n {
			if err := op(in, out); err != nil {
				return err
			}
		}
		return nil
	}
}

// alltoallBytes is 1 MiB rounded down to a whole number of float32 per
// rank.
func alltoallBytes(size int) int { return (1 << 20) / (4 * size) * 4 * size }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
