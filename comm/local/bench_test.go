package local_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

// condBarrier is the reference: the least a shared-memory collective can
// cost, a mutex and a sync.Cond with a generation counter.
type condBarrier struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n, left int
	gen     uint64
	sum     int64
}

func newCondBarrier(n int) *condBarrier {
	b := &condBarrier{n: n, left: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// allreduce adds v into a shared sum and waits for every rank.
func (b *condBarrier) allreduce(v int64) {
	b.mu.Lock()
	b.sum += v
	b.left--
	if b.left == 0 {
		b.left = b.n
		b.gen++
		b.cond.Broadcast()
		b.mu.Unlock()
		return
	}
	g := b.gen
	for g == b.gen {
		b.cond.Wait()
	}
	b.mu.Unlock()
}

var sizes = []int{2, 4, 8}

func BenchmarkReferenceCondBarrier(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			cb := newCondBarrier(n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					for range b.N {
						cb.allreduce(1)
					}
				})
			}
			wg.Wait()
		})
	}
}

func runBench(b *testing.B, n int, checked bool, body func(ctx context.Context, c comm.Comm, iters int) error) {
	b.ReportAllocs()
	err := local.Run(context.Background(), n, local.Config{Checked: checked}, func(ctx context.Context, c comm.Comm) error {
		// Warm the buffers up, then measure from rank 0's point of view.
		if err := body(ctx, c, 10); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			b.ResetTimer()
		}
		err := body(ctx, c, b.N)
		if c.Rank() == 0 {
			b.StopTimer()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func allreduceBody(ctx context.Context, c comm.Comm, iters int) error {
	in, out := []int64{1}, []int64{0}
	for range iters {
		if err := c.AllreduceInt64(ctx, comm.Sum, in, out); err != nil {
			return err
		}
	}
	return nil
}

func allgatherBody(ctx context.Context, c comm.Comm, iters int) error {
	var ids [64]int64
	var g comm.Gathered
	for i := range iters {
		k := (i*7 + c.Rank()*13) % 65 // 0..64 ids, changing every call
		if err := c.AllgatherInt64s(ctx, ids[:k], &g); err != nil {
			return err
		}
	}
	return nil
}

func barrierBody(ctx context.Context, c comm.Comm, iters int) error {
	for range iters {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	return nil
}

func BenchmarkAllreduce1(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) { runBench(b, n, false, allreduceBody) })
		b.Run(fmt.Sprintf("ranks=%d/checked", n), func(b *testing.B) { runBench(b, n, true, allreduceBody) })
	}
}

func BenchmarkAllgather0to64(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) { runBench(b, n, false, allgatherBody) })
		b.Run(fmt.Sprintf("ranks=%d/checked", n), func(b *testing.B) { runBench(b, n, true, allgatherBody) })
	}
}

func BenchmarkBarrier(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) { runBench(b, n, false, barrierBody) })
	}
}

// BenchmarkOneRankAllgather is the checked layer's own cost: a group of one
// rank never waits, so the difference is stamp, call path, flight record.
func BenchmarkOneRankAllgather(b *testing.B) {
	b.Run("unchecked", func(b *testing.B) { runBench(b, 1, false, allgatherBody) })
	b.Run("checked", func(b *testing.B) { runBench(b, 1, true, allgatherBody) })
}
