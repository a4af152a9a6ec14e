package sweep

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
)

func cellConfig(ctx, gen string, arr executor.Arrival, seed uint64) executor.Config {
	return executor.Config{Ctx: topology.MustParseLayout(ctx), Gen: topology.MustParseLayout(gen), Model: topology.DefaultModel(),
		Workload: executor.Workload{Requests: 4, InputTokens: 64, OutputTokens: 3, Arrival: arr, Seed: seed}}
}

// Run runs every repeat once, opt.Jobs at a time, each with its workload
// seed advanced by the repeat and the SLO tally as its sink; it fills
// every cell's reports, counts, statistics and summary, synthesises a
// report for a repeat that returned none, drops per-rank reports, and
// calls Done once a repeat.
func TestRunFillsEveryCell(t *testing.T) {
	cells := []*Cell{
		NewCell(cellConfig("tp=1", "tp=2", executor.Arrival{Kind: executor.Poisson, Rate: 5}, 100), 3),
		NewCell(cellConfig("tp=2", "tp=2", executor.Arrival{Kind: executor.Closed, Concurrency: 2}, 200), 2),
	}
	require.Equal(t, "tp=1/tp=2", cells[0].Pair.String())
	require.InDelta(t, 5, cells[0].Rate, 0)
	require.Zero(t, cells[1].Rate, "a closed arrival has no rate")
	slo := goodput.SLO{TTFT: 10e6, TPOT: 10e6, Share: 0.5}

	var mu sync.Mutex
	seeds := map[string][]uint64{}
	var running, most atomic.Int32
	var done atomic.Int32
	runner := func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		mu.Lock()
		seeds[cfg.Ctx.String()] = append(seeds[cfg.Ctx.String()], cfg.Workload.Seed)
		mu.Unlock()
		assert.True(t, cfg.Records) // assert, not require: this runs in Run's worker
		// i requests meet the SLO (TTFT 5 ms), one misses it (TTFT 50 ms).
		for range i {
			cfg.Sink.Record(executor.RequestRecord{Output: 3, FirstToken: 5e6, Done: 9e6, State: request.Completed})
		}
		cfg.Sink.Record(executor.RequestRecord{Output: 3, FirstToken: 50e6, Done: 54e6, State: request.Completed})
		if cfg.Ctx.TP == 2 && i == 1 {
			return nil, errors.New("repeat 1 broke") // no report: Run makes one
		}
		return &executor.Report{ThroughputRPS: float64(10 + i), Ranks_: []executor.RankReport{{}}}, nil
	}
	got := Run(t.Context(), cells, Options{Jobs: 2, SLO: slo, Done: func(*Cell, int) { done.Add(1) }}, runner)
	require.Len(t, got, 2, "every cell ran to its end")
	assert.EqualValues(t, 5, done.Load(), "Done once a repeat")
	assert.LessOrEqual(t, most.Load(), int32(2), "at most Jobs at once")
	assert.ElementsMatch(t, []uint64{100, 101, 102}, seeds["tp=1"])
	assert.ElementsMatch(t, []uint64{200, 201}, seeds["tp=2"])

	a := cells[0]
	assert.Equal(t, []int{0, 1, 2}, a.Met)
	assert.Equal(t, []bool{true, true, true}, a.Ran)
	for i, rep := range a.Reports {
		assert.Nil(t, rep.Ranks_, "repeat %d keeps no rank reports", i)
		assert.InDelta(t, 10+float64(i), a.Stats[i].Tput, 0)
		assert.InDelta(t, float64(i)/4, a.Stats[i].Attain, 1e-12)
	}
	assert.InDelta(t, 11, a.Summary.Tput, 0, "the median repeat")
	assert.InDelta(t, 11.0/3, a.Summary.TputPerGPU, 1e-12)
	assert.False(t, a.Failed())

	b := cells[1]
	require.Error(t, b.Errs[1])
	require.NotNil(t, b.Reports[1], "a synthesised report")
	assert.Equal(t, []string{"repeat 1 broke"}, b.Reports[1].Errors)
	assert.Equal(t, "tp=2", b.Reports[1].Ctx)
	assert.True(t, b.FailedAt(1) && !b.FailedAt(0) && b.Failed())
	assert.Equal(t, 1, b.Summary.FailedRuns)
	assert.Zero(t, b.Stats[1].Attain, "a failed repeat attains nothing")
}

// When ctx ends, no repeat starts any more; a repeat that returns an
// error after it ended is cut short (its cell is left out of the result),
// one that returns none ran to its end.
func TestRunStopsWhenContextEnds(t *testing.T) {
	for _, cut := range []bool{true, false} {
		var cells []*Cell
		for range 6 {
			cells = append(cells, NewCell(cellConfig("tp=1", "tp=1", executor.Arrival{Kind: executor.Burst}, 1), 1))
		}
		ctx, cancel := context.WithCancel(t.Context())
		var started atomic.Int32
		runner := func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
			if started.Add(1) == 2 {
				cancel() // the second run is interrupted
				<-ctx.Done()
				if cut {
					return &executor.Report{}, ctx.Err()
				}
			}
			return &executor.Report{ThroughputRPS: 1}, nil
		}
		got := Run(ctx, cells, Options{Jobs: 1}, runner)
		cancel()
		assert.EqualValues(t, 2, started.Load(), "nothing started after ctx ended")
		if cut {
			require.Len(t, got, 1, "only the first cell finished before the end")
			assert.Same(t, cells[0], got[0])
			assert.False(t, cells[1].Ran[0], "the cut run is not a result")
		} else {
			require.Len(t, got, 2, "the second ended without an error: a result")
			assert.True(t, cells[1].Ran[0])
		}
	}
}

// Jobs repeats run at once: a runner that waits until Jobs of them are
// running (or gives up after a deadline) sees them; with Jobs 0, one per
// GOMAXPROCS.
func TestRunJobsAtOnce(t *testing.T) {
	for _, tc := range []struct{ jobs, procs, want int }{{3, 0, 3}, {0, 3, 3}} {
		if tc.procs > 0 {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
		}
		var mu sync.Mutex
		running, most := 0, 0
		all := make(chan struct{})
		runner := func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
			mu.Lock()
			running++
			most = max(most, running)
			if running == tc.want {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
			}
			mu.Lock()
			running--
			mu.Unlock()
			return &executor.Report{}, nil
		}
		cell := NewCell(cellConfig("tp=1", "tp=1", executor.Arrival{Kind: executor.Burst}, 1), tc.want)
		Run(t.Context(), []*Cell{cell}, Options{Jobs: tc.jobs}, runner)
		assert.Equal(t, tc.want, most, "jobs %d, GOMAXPROCS %d", tc.jobs, runtime.GOMAXPROCS(0))
	}
}

// A cell made by hand (no per-repeat slices) runs; one with no repeats
// does not and is no result; NewCell makes at least one repeat and reads
// a rate arrival's rate.
func TestRunHandMadeCells(t *testing.T) {
	cfg := cellConfig("tp=1", "tp=1", executor.Arrival{Kind: executor.Rate, Rate: 7}, 1)
	hand := &Cell{Pair: Pair{cfg.Ctx, cfg.Gen}, Config: cfg, Reports: make([]*executor.Report, 2)}
	empty := &Cell{Pair: Pair{cfg.Ctx, cfg.Gen}, Config: cfg, Rate: 1000}
	leaky := NewCell(cfg, 0)
	require.Len(t, leaky.Reports, 1)
	assert.InDelta(t, 7, leaky.Rate, 0, "a rate arrival's rate")
	got := Run(t.Context(), []*Cell{hand, empty, leaky}, Options{}, func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
		if cfg.Workload.Seed == 1 && i == 0 && len(cfg.Faults) == 0 {
			return &executor.Report{ThroughputRPS: 1}, nil
		}
		return &executor.Report{ThroughputRPS: 1}, nil
	})
	assert.Equal(t, []*Cell{hand, leaky}, got)
	assert.Len(t, hand.Stats, 2)
	assert.Zero(t, Goodputs([]*Cell{empty}, goodput.SLO{Share: 0.5})[0].Rate, "a cell that never ran has no goodput")
	leaky.Reports[0].LeakedBlocks = 1
	assert.True(t, leaky.FailedAt(0), "a leak fails the repeat")
}
