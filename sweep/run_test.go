package sweep

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

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
		require.True(t, cfg.Records)
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

// When ctx ends, no repeat starts any more, and a repeat that returns an
// error after it ended is cut short: its cell is left out of the result.
func TestRunStopsWhenContextEnds(t *testing.T) {
	var cells []*Cell
	for range 6 {
		cells = append(cells, NewCell(cellConfig("tp=1", "tp=1", executor.Arrival{Kind: executor.Burst}, 1), 1))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var started atomic.Int32
	runner := func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
		if started.Add(1) == 2 {
			cancel() // the second run is interrupted
			<-ctx.Done()
			return &executor.Report{}, ctx.Err()
		}
		return &executor.Report{ThroughputRPS: 1}, nil
	}
	got := Run(ctx, cells, Options{Jobs: 1}, runner)
	require.Len(t, got, 1, "only the first cell finished before the end")
	assert.Same(t, cells[0], got[0])
	assert.EqualValues(t, 2, started.Load(), "nothing started after ctx ended")
	assert.False(t, cells[1].Ran[0], "the cut run is not a result")
}
