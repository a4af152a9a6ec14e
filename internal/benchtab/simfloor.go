package benchtab

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
// GEN blocks, the GEN rank checks them), each timed as a copy that
// streams through a working set as large as the run's peak (the pools
// it cycles its bytes through), the cheapest a pass can be. Its value is
// the speed that floor allows (floorSpeed). It has no goal of its own: it
// bounds the run's row above it, so a run that misses its goal while its
// floor is far above the goal misses it by the simulator's own work.
func simFloorRow(name string, t simTiming, reps int) (Row, error) {
	if t.rss <= 0 || t.moved <= 0 || t.virtual <= 0 {
		return Row{}, fmt.Errorf("the run reported peak RSS %d B, %d B moved, %g s of virtual time: a floor needs all three", t.rss, t.moved, t.virtual)
	}
	reps = max(1, reps)
	var touch, pass float64
	for i := range reps {
		tc, err := touchFresh(t.rss)
		if err != nil {
			return Row{}, err
		}
		p := passOver(t.moved, t.rss)
		if i == 0 || tc+3*p < touch+3*pass {
			touch, pass = tc, p
		}
	}
	note := fmt.Sprintf("best of %d: first touch of %s of fresh pool memory (the run's peak RSS) %.3g s + 3 passes over its %.0f MiB of moved KV bytes through a working set of that size, %.3g s each, for %.4g s of virtual time",
		reps, fmtGiB(t.rss), touch, float64(t.moved)/(1<<20), pass, t.virtual)
	return RatioRow(Row{Section: simSpeedSection, Figure: name + ": the floor its bytes set (fresh memory + 3 passes), no simulation",
		Value: floorSpeed(t.virtual, touch, pass), Unit: "x real time at most", Reference: "real time (1 virtual s a wall s)", RefValue: 1,
		Note: note}), nil
}

// floorSpeed is the speed (virtual seconds per wall second) a run of
// virtual seconds could reach if first touching its memory took touch
// seconds and each of its three passes over its bytes pass seconds, and
// nothing else took any time.
func floorSpeed(virtual, touch, pass float64) float64 { return virtual / (touch + 3*pass) }

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

// passOver returns the seconds one copy of n bytes takes, 1 MiB at a time,
// streaming through source and destination buffers of half of working
// bytes each (touched once before the clock starts: a pass, not a first
// touch), wrapping around as the run's blocks are reused.
func passOver(n, working int64) float64 {
	const chunk = 1 << 20
	half := max(chunk, int(working/2)/chunk*chunk)
	src, dst := make([]byte, half), make([]byte, half)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	start := time.Now()
	off := 0
	for left := n; left > 0; left -= chunk {
		k := int(min(int64(chunk), left))
		copy(dst[off:off+k], src[off:off+k])
		if off += chunk; off+chunk > half {
			off = 0
		}
	}
	return time.Since(start).Seconds()
}
