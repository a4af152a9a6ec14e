package executor_test

// Whole-run benchmarks, in-process (executor.Run on launch.Local, unchecked). One
// benchmark op is one request; the figures that matter are the custom
// metrics taken from the run's Report: req/s (control-plane throughput with
// zero compute cost) and handover-p50/p99-us (a request's arrival at an
// idle CTX rank to its prefill start). `rankrun bench` measures the same
// figures next to their replays and writes the table (BENCHMARKS.md).

import (
	"context"
	"testing"
	"time"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
)

func benchRun(b *testing.B, cfg executor.Config) *executor.Report {
	b.Helper()
	b.ReportAllocs()
	cfg.Defaults()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := runLocal(ctx, cfg, false, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	if !rep.OK() || rep.RequestsCompleted != cfg.Workload.Requests {
		b.Fatalf("run not clean: %d of %d completed, errors %v", rep.RequestsCompleted, cfg.Workload.Requests, rep.Errors)
	}
	return rep
}

// BenchmarkControlPlane: zero compute cost, small KV (16 tokens), 16
// requests outstanding; b.N requests per run.
func BenchmarkControlPlane(b *testing.B) {
	for _, gen := range []string{"tp=1", "tp=4"} {
		b.Run("ctx=tp=1/gen="+gen, func(b *testing.B) {
			cfg := executor.Config{Ctx: topology.MustParseLayout("tp=1"), Gen: topology.MustParseLayout(gen), Model: smallModel,
				Workload:  executor.Workload{Requests: max(b.N, 16), InputTokens: 16, OutputTokens: 1, Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: 16}, Seed: 1},
				CtxBlocks: 256, GenBlocks: 256}
			rep := benchRun(b, cfg)
			b.ReportMetric(rep.ThroughputRPS, "req/s")
		})
	}
}

// BenchmarkIdleHandover: one request at a time (closed=1), zero compute
// cost, so every request arrives at an idle CTX rank.
func BenchmarkIdleHandover(b *testing.B) {
	cfg := executor.Config{Ctx: topology.MustParseLayout("tp=1"), Gen: topology.MustParseLayout("tp=1"), Model: smallModel,
		Workload:  executor.Workload{Requests: max(b.N, 8), InputTokens: 16, OutputTokens: 1, Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: 1}, Seed: 1},
		CtxBlocks: 64, GenBlocks: 64, SenderWaitSlice: 200 * time.Millisecond}
	rep := benchRun(b, cfg)
	b.ReportMetric(rep.IdleHandoverMs.P50*1e3, "handover-p50-us")
	b.ReportMetric(rep.IdleHandoverMs.P99*1e3, "handover-p99-us")
}
