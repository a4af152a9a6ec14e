package main

import (
	"fmt"
	"time"

	"github.com/rankrun/rankrun/kvpool"
)

// simFloorRow measures the least wall time a run that moved t.moved KV
// bytes and peaked at t.rss could take on this machine, whatever the
// simulator did besides: the first touch of t.rss bytes of fresh memory
// (pools on a kvpool.Arena, as the run's are: one byte a 4 KiB page, so
// the kernel's zeroing of the page is the cost) plus three passes over
// the moved bytes (the CTX rank fills them, the sim copies them into the
// GEN blocks, the GEN rank checks them), each timed as a copy between warm
// buffers, the cheapest a pass can be. Its value is the speed that floor
// allows (virtual / floor seconds), held against the run's goal: where
// the floor alone misses the goal, no simulator change can meet it while
// every byte of the sample is held and moved.
func simFloorRow(name string, t simTiming, reps int) (benchRow, error) {
	if t.rss <= 0 || t.moved <= 0 || t.virtual <= 0 {
		return benchRow{}, fmt.Errorf("the run reported peak RSS %d B, %d B moved, %g s of virtual time: a floor needs all three", t.rss, t.moved, t.virtual)
	}
	best := 0.0
	for i := range max(1, reps) {
		touch, err := touchFresh(t.rss)
		if err != nil {
			return benchRow{}, err
		}
		f := touch + 3*passOver(t.moved)
		if i == 0 || f < best {
			best = f
		}
	}
	note := fmt.Sprintf("best of %d: first touch of %s of fresh pool memory (the run's peak RSS) + 3 passes over its %.0f MiB of moved KV bytes = %.3g s, for %.4g s of virtual time",
		reps, fmtGiB(t.rss), float64(t.moved)/(1<<20), best, t.virtual)
	return ratioRow(benchRow{Section: simSpeedSection, Figure: name + ": the floor its bytes set (fresh memory + 3 passes), no simulation",
		Value: t.virtual / best, Unit: "x real time at most", Reference: "real time (1 virtual s a wall s)", RefValue: 1,
		Goal: ">=100", Note: note}), nil
}

// touchFresh returns the seconds it takes to write one byte of each 4 KiB
// page of n bytes of fresh pool memory, allocated as a run's pools are.
func touchFresh(n int64) (float64, error) {
	const blockBytes = 1 << 20
	blocks := max(1, int(n/blockBytes))
	a := kvpool.NewArena()
	defer a.Free()
	start := time.Now()
	p, err := kvpool.NewPool(kvpool.PoolConfig{Blocks: blocks, BlockBytes: blockBytes, Name: "floor", Arena: a})
	if err != nil {
		return 0, err
	}
	for b := range blocks {
		blk := p.Block(kvpool.BlockID(b))
		for i := 0; i < len(blk); i += 4096 {
			blk[i] = 1
		}
	}
	return time.Since(start).Seconds(), nil
}

// passOver returns the seconds one copy of n bytes takes between two warm
// 16 MiB buffers, a chunk at a time.
func passOver(n int64) float64 {
	const chunk = 16 << 20
	src, dst := make([]byte, chunk), make([]byte, chunk)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	start := time.Now()
	for left := n; left > 0; left -= chunk {
		copy(dst[:min(int64(chunk), left)], src)
	}
	return time.Since(start).Seconds()
}
