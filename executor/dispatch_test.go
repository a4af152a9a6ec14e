package executor_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// The runtime's routing is the cost model's: uniform over the experts (or
// within a token's groups), so a token reaches on average Routing.Parts
// parts (DeepSeek-R1: 256 experts, 8 a token, from 4 of 8 groups; and the
// same without groups), every token at least one, at most min(topk,
// parts), and the parts are balanced. The counts are a function of the
// tokens alone.
//
// So do the counts the runtime's dispatch checks (SampledRouteCounts: a
// grouped routing's tokens routed by its table).
func TestRouteCountsAreUniform(t *testing.T) {
	for _, r := range []executor.Routing{{Experts: 256, TopK: 8}, {Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}} {
		for _, f := range []struct {
			name  string
			route func(executor.Routing, []executor.DispatchToken, []int64) error
		}{{"exact", executor.RouteCounts}, {"sampled", executor.SampledRouteCounts}} {
			t.Run(fmt.Sprintf("%+v/%s", r, f.name), func(t *testing.T) { testRouteCounts(t, r, f.route) })
		}
	}
}

func testRouteCounts(t *testing.T, r executor.Routing, route func(executor.Routing, []executor.DispatchToken, []int64) error) {
	var toks []executor.DispatchToken
	for id := range 50 {
		for p := range 200 {
			toks = append(toks, executor.DispatchToken{ID: request.ID(id + 1), Pos: p})
		}
	}
	for _, parts := range []int{1, 2, 4, 8, 32} {
		counts := make([]int64, parts)
		require.NoError(t, route(r, toks, counts))
		var sum int64
		for _, c := range counts {
			sum += c
		}
		per := float64(sum) / float64(len(toks))
		assert.InEpsilon(t, r.Parts(parts), per, 0.02, "parts=%d: copies per token", parts)
		assert.GreaterOrEqual(t, per, 1.0)
		assert.LessOrEqual(t, per, float64(min(r.TopK, parts)))
		share := float64(sum) / float64(parts)
		for p, c := range counts { // balanced: each part within 4 standard deviations of its share
			assert.InDelta(t, share, float64(c), 4*math.Sqrt(share), "parts=%d part %d", parts, p)
		}
		again := make([]int64, parts)
		require.NoError(t, route(r, toks, again))
		assert.Equal(t, counts, again)
	}
	// Bad routing is an error, not a panic or a hang.
	assert.ErrorContains(t, route(executor.Routing{Experts: 6, TopK: 2}, toks, make([]int64, 4)), "experts = 6: the 4 EP parts must divide it")
	assert.ErrorContains(t, route(executor.Routing{Experts: 2, TopK: 1}, toks, make([]int64, 4)), "experts = 2: the 4 EP parts must divide it")
	assert.ErrorContains(t, route(executor.Routing{Experts: 8, TopK: 9}, toks, make([]int64, 4)), "experts per token = 9: must be in [1, experts (8)]")
	assert.ErrorContains(t, route(executor.Routing{Experts: 8, TopK: 4, Groups: 4, GroupsPerToken: 1}, toks, make([]int64, 4)), "groups per token = 1")
	assert.ErrorContains(t, route(r, toks, nil), "over 0 parts")
}

// dispatchConfig is a run whose CTX and GEN both dispatch: attention-DP
// with ep on each side.
func dispatchConfig(ctxL, genL string, faults ...executor.Fault) executor.Config {
	cfg := baseConfig(ctxL, genL, transceiver.Async)
	cfg.Routing = executor.Routing{Experts: 24, TopK: 4}
	cfg.Workload.Requests = 12
	cfg.PrefillPerToken, cfg.DecodePerStep = 10*time.Microsecond, time.Millisecond
	cfg.Faults = faults
	return cfg
}

// EP dispatch counts agree on every rank when nothing is wrong, on both
// sides, in process and in simulation.
func TestDispatchAgrees(t *testing.T) {
	for _, l := range [][2]string{{"dp=4,ep=4,adp", "dp=2,ep=2,adp"}, {"tp=2", "tp=2,dp=2,ep=4,adp"}, {"pp=2,dp=2,ep=2,adp", "dp=3,ep=3,adp"},
		{"cp=2,dp=2,ep=2,adp", "tp=2,dp=2,ep=2,adp"}} {
		t.Run(l[0]+"->"+l[1], func(t *testing.T) {
			cfg := dispatchConfig(l[0], l[1])
			rep := run(t, cfg)
			require.True(t, rep.OK(), "%v", rep.Errors)
			require.Equal(t, 12, rep.RequestsCompleted)
			srep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: 3, Checked: true})
			require.NoError(t, err)
			require.Equal(t, 12, srep.RequestsCompleted)
		})
	}
}

// A rank whose dispatch counts differ from the agreed batch's (misroute)
// ends the run with ErrDispatch, named by a peer that received them, at
// every rank position: a group's first rank (world rank 0 on CTX), a
// middle one and its last, on both sides, in process and in simulation;
// and in EP groups whose members are not ranks 0..ep-1 (a PP stage's, and
// TP siblings under attention-DP), where a member's index in its group is
// not its rank.
func TestMisrouteIsNamed(t *testing.T) {
	for _, c := range []struct {
		ctxL, genL string
		role       topology.Role
		rank       int
		world      int
	}{
		{"dp=4,ep=4,adp", "dp=3,ep=3,adp", topology.Context, 0, 0}, {"dp=4,ep=4,adp", "dp=3,ep=3,adp", topology.Context, 1, 1},
		{"dp=4,ep=4,adp", "dp=3,ep=3,adp", topology.Context, 3, 3},
		{"dp=4,ep=4,adp", "dp=3,ep=3,adp", topology.Generation, 0, 4}, {"dp=4,ep=4,adp", "dp=3,ep=3,adp", topology.Generation, 1, 5},
		{"dp=4,ep=4,adp", "dp=3,ep=3,adp", topology.Generation, 2, 6},
		// Stage 1's EP group is ctx ranks {1, 3}: rank 3 is member 1.
		{"pp=2,dp=2,ep=2,adp", "tp=2,dp=2,ep=2,adp", topology.Context, 3, 3},
		// GEN tp=2,dp=2,ep=2,adp: EP groups {0, 1} and {2, 3}; rank 3 is member 1.
		{"pp=2,dp=2,ep=2,adp", "tp=2,dp=2,ep=2,adp", topology.Generation, 3, 7},
	} {
		f := executor.Fault{Kind: executor.FaultMisroute, Role: c.role, Rank: c.rank, Request: 5}
		t.Run(c.ctxL+"->"+c.genL+"/"+f.String(), func(t *testing.T) {
			cfg := dispatchConfig(c.ctxL, c.genL, f)
			sender := fmt.Sprintf("from %s rank %d (world rank %d)", c.role, c.rank, c.world)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := runLocal(ctx, cfg, true, 10*time.Second)
			require.ErrorIs(t, err, executor.ErrDispatch)
			assert.Contains(t, err.Error(), sender)
			_, _, err = runSim(t.Context(), cfg, sim.Config{Seed: 1, Checked: true})
			require.ErrorIs(t, err, executor.ErrDispatch)
			assert.Contains(t, err.Error(), sender)
		})
	}
}

// Bad input: a dispatching layout needs the model's routing.
func TestDispatchNeedsRouting(t *testing.T) {
	cfg := dispatchConfig("dp=4,ep=4,adp", "tp=1")
	cfg.Routing = executor.Routing{}
	cfg.Defaults()
	assert.ErrorContains(t, cfg.Validate(), "ctx layout dp=4,ep=4,adp dispatches tokens over 4 EP parts: topology: invalid model: routing: experts = 0: must be > 0")
	cfg.Routing = executor.Routing{Experts: 6, TopK: 2}
	assert.ErrorContains(t, cfg.Validate(), "experts = 6: the 4 EP parts must divide it")
	cfg.Routing = executor.Routing{Experts: 8, TopK: 9}
	assert.ErrorContains(t, cfg.Validate(), "experts per token = 9: must be in [1, experts (8)]")
	cfg.Routing = executor.Routing{Experts: 8, TopK: 4, Groups: 4, GroupsPerToken: 1}
	assert.ErrorContains(t, cfg.Validate(), "groups per token = 1: its groups hold 2 experts, fewer than the 4 a token picks")
	cfg = dispatchConfig("tp=2", "tp=2", executor.Fault{Kind: executor.FaultMisroute, Role: topology.Generation, Rank: 0, Request: 1})
	cfg.Defaults()
	assert.ErrorContains(t, cfg.Validate(), "misroute applies to a layout that dispatches tokens")
}

// BenchmarkRouteCounts is the dispatch counts' host cost per token (the
// seed's CTX step routes 4 x 8k tokens on every rank), beside a reference
// that only draws TopK hashes a token: what is left is the dedupe and the
// counting. go test -bench RouteCounts ./executor
func BenchmarkRouteCounts(b *testing.B) {
	r := executor.Routing{Experts: 256, TopK: 8}
	toks := make([]executor.DispatchToken, 8192)
	for i := range toks {
		toks[i] = executor.DispatchToken{ID: 7, Pos: i}
	}
	counts := make([]int64, 4)
	b.Run("route", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := executor.RouteCounts(r, toks, counts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
	})
	// DeepSeek-R1's router: every expert scored, the best 4 of 8 groups.
	grouped := r
	grouped.Groups, grouped.GroupsPerToken = 8, 4
	b.Run("route, grouped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := executor.RouteCounts(grouped, toks, counts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
	})
	b.Run("reference: hashes only", func(b *testing.B) {
		var sink uint64
		for b.Loop() {
			for _, t := range toks {
				h := uint64(t.ID)<<32 ^ uint64(t.Pos)
				for range r.TopK {
					h ^= h >> 30
					h *= 0xbf58476d1ce4e5b9
					h ^= h >> 27
					h *= 0x94d049bb133111eb
					h ^= h >> 31
					sink += h % uint64(r.Experts)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
		if sink == 42 {
			b.Log(sink)
		}
	})
}
