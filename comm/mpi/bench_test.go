//go:build mpi

package mpi

import (
	"context"
	"testing"

	"github.com/rankrun/rankrun/comm"
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
