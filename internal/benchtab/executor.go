// The rows of make bench's table measured here: in-process executor runs.

package benchtab

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/launch"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
	"go.uber.org/zap"
)

// smallBenchModel: small KV (16 KiB for 16 tokens on one rank).
var smallBenchModel = topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}

const seedGoodIdleStepMs = 210.0 // seed 000: CTX post-prefill idle iteration, good build

// runLocalBench runs one in-process executor run (unchecked).
func runLocalBench(cfg executor.Config) (*executor.Report, error) {
	cfg.Log = zap.NewNop()
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return executor.Run(ctx, cfg, launch.Local{Timeout: 30 * time.Second})
}

func benchConfig(ctxL, genL string, requests, input, output, closed int) executor.Config {
	return executor.Config{Ctx: topology.MustParseLayout(ctxL), Gen: topology.MustParseLayout(genL), Model: topology.DefaultModel(),
		Workload:  executor.Workload{Requests: requests, InputTokens: input, OutputTokens: output, Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: closed}, Seed: 1},
		CtxBlocks: 512, GenBlocks: 512}
}

// executorRows runs the in-process executor figures (sections 4, 5 and 6)
// and adds their rows, with the mpirun handover's from raw ("": none); a
// run that fails ends the table.
func executorRows(raw string, handoverN, seedN, cpN int, add func(Row), missing func(string, error)) error {
	slice := 200 * time.Millisecond
	// 4: idle handover, in-process, then under mpirun (reports from bench.sh).
	handover := func(label string, clean, bad *executor.Report) {
		sec := "4 idle handover, arrival -> prefill start (" + label + ")"
		for _, q := range []struct {
			name string
			v, b float64
		}{{"p50", clean.IdleHandoverMs.P50, bad.IdleHandoverMs.P50}, {"p99", clean.IdleHandoverMs.P99, bad.IdleHandoverMs.P99}} {
			r := Row{Section: sec, Figure: fmt.Sprintf("ctx tp=1 -> gen tp=1, closed=1, decode 5 ms: %s (n=%d)", q.name, clean.IdleHandoverMs.N),
				Value: q.v, Unit: "ms", Reference: fmt.Sprintf("unclamped-poll replay, slice %v (n=%d)", slice, bad.IdleHandoverMs.N), RefValue: q.b}
			r = RatioRow(r)
			if q.name == "p99" {
				r.Goal = "p99 < 1 ms, >= 200x better than 210 ms"
				r.Met = ptr(q.v < 1 && seedGoodIdleStepMs/q.v >= 200)
				r.Note = fmt.Sprintf("seed good idle step 210 ms / p99 = %.0fx", seedGoodIdleStepMs/q.v)
			}
			add(r)
		}
	}
	cfg := benchConfig("tp=1", "tp=1", handoverN, 16, 1, 1)
	cfg.Model = smallBenchModel
	cfg.SenderWaitSlice = slice
	zero, err := runLocalBench(cfg)
	if err != nil {
		return fmt.Errorf("handover run: %w", err)
	}
	add(RatioRow(Row{Section: "4 idle handover, arrival -> prefill start (in-process)", Figure: fmt.Sprintf("ctx tp=1 -> gen tp=1, closed=1, zero cost: p99 (n=%d)", zero.IdleHandoverMs.N),
		Value: zero.IdleHandoverMs.P99, Unit: "ms", Reference: "seed 000 good idle step", RefValue: seedGoodIdleStepMs, Goal: "<=0.005",
		Note: fmt.Sprintf("p50 %.4f ms; goal: p99 < 1 ms and >= 200x better than 210 ms", zero.IdleHandoverMs.P50)}))
	// Side by side with the replay: a 5 ms decode step lets the CTX rank
	// reap and go idle before the next arrival, so every arrival meets an
	// idle (or, with the replay, sleeping) rank.
	cfg.Workload.Requests = max(10, handoverN/4)
	cfg.DecodePerStep = 5 * time.Millisecond
	clean, err := runLocalBench(cfg)
	if err != nil {
		return fmt.Errorf("handover run: %w", err)
	}
	cfg.Workload.Requests = 10
	cfg.Replays = executor.ReplaySet{executor.UnclampedPoll: true}
	bad, err := runLocalBench(cfg)
	if err != nil {
		return fmt.Errorf("handover run (unclamped-poll): %w", err)
	}
	handover("in-process", clean, bad)
	if raw != "" {
		mc, err1 := readReport(filepath.Join(raw, "mpi-handover.json"))
		mb, err2 := readReport(filepath.Join(raw, "mpi-handover-unclamped.json"))
		if err := errors.Join(err1, err2); err != nil {
			missing("mpirun handover", err)
		} else {
			handover("mpirun -np 2", mc, mb)
		}
	}

	// 5: the seed workload shape, scaled down.
	sec := "5 seed shape: closed=1, 2048 in / 8 out, prefill 100us/token, decode 10ms/step, slice 200ms"
	for _, pair := range [][2]string{{"tp=1", "tp=4"}, {"dp=2", "tp=4"}} {
		cfg := benchConfig(pair[0], pair[1], seedN, 2048, 8, 1)
		cfg.PrefillPerToken, cfg.DecodePerStep, cfg.SenderWaitSlice = 100*time.Microsecond, 10*time.Millisecond, slice
		off, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("seed shape %v: %w", pair, err)
		}
		cfg.Replays = executor.ReplaySet{executor.UnclampedPoll: true}
		on, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("seed shape %v unclamped-poll: %w", pair, err)
		}
		lbl := fmt.Sprintf("ctx %s -> gen %s", pair[0], pair[1])
		add(Row{Section: sec, Figure: lbl + ": throughput, unclamped-poll on", Value: on.ThroughputRPS, Unit: "req/s",
			Reference: "replay off", RefValue: off.ThroughputRPS, Ratio: on.ThroughputRPS / off.ThroughputRPS,
			Note: fmt.Sprintf("%+.1f%% (seed 000: -27.7%%)", (on.ThroughputRPS/off.ThroughputRPS-1)*100)})
		add(Row{Section: sec, Figure: lbl + ": mean TTFT, unclamped-poll on", Value: on.TTFTMs.Mean, Unit: "ms",
			Reference: "replay off", RefValue: off.TTFTMs.Mean, Ratio: on.TTFTMs.Mean / off.TTFTMs.Mean,
			Note: fmt.Sprintf("%+.2f intervals per request (seed 000: +1 interval)", (on.TTFTMs.Mean-off.TTFTMs.Mean)/float64(slice.Milliseconds()))})
		add(Row{Section: sec, Figure: lbl + ": idle step p50, unclamped-poll on", Value: on.IdleStepMs.P50, Unit: "ms",
			Reference: "replay off", RefValue: off.IdleStepMs.P50, Ratio: on.IdleStepMs.P50 / off.IdleStepMs.P50,
			Note: "seed 000: 1151 ms vs 210 ms with a 1000 ms interval"})
	}
	// no-idle-reap applies to a single-rank sync CTX (seed 001).
	{
		cfg := benchConfig("tp=1", "tp=4", seedN*2, 2048, 8, 1)
		cfg.PrefillPerToken, cfg.DecodePerStep, cfg.SenderWaitSlice = 100*time.Microsecond, 10*time.Millisecond, slice
		cfg.Mode = transceiver.Sync
		cfg.CtxBlocks = 3 * 2048 / cfg.Model.TokensPerBlock // room for 3 requests
		cfg.StallTimeout = 2 * time.Second
		off, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("seed shape sync: %w", err)
		}
		cfg.Replays = executor.ReplaySet{executor.NoIdleReap: true}
		on, err := runLocalBench(cfg)
		v, note := 0.0, ""
		switch {
		case err != nil:
			note = "replay stalls: " + FirstLine(err.Error())
		case on != nil:
			v = on.ThroughputRPS
			note = fmt.Sprintf("%d of %d completed", on.RequestsCompleted, cfg.Workload.Requests)
		}
		add(Row{Section: sec, Figure: fmt.Sprintf("ctx tp=1 -> gen tp=4, sync transfer, %d CTX blocks (3 requests): throughput, no-idle-reap on", cfg.CtxBlocks),
			Value: v, Unit: "req/s", Reference: "replay off", RefValue: off.ThroughputRPS, Ratio: v / off.ThroughputRPS, Note: note})
	}

	// 6: control-plane throughput, zero compute cost.
	sec = "6 control-plane throughput, zero cost, 16 tokens (16 KiB KV)/request, closed=16 (in-process)"
	var base float64
	for _, gen := range []string{"tp=1", "tp=4"} {
		cfg := benchConfig("tp=1", gen, cpN, 16, 1, 16)
		cfg.Model = smallBenchModel
		rep, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("control-plane run %s: %w", gen, err)
		}
		if !rep.OK() {
			return fmt.Errorf("control-plane run %s: not clean: %v", gen, rep.Errors)
		}
		r := Row{Section: sec, Figure: fmt.Sprintf("ctx tp=1 -> gen %s, %d requests", gen, cpN), Value: rep.ThroughputRPS, Unit: "req/s"}
		if base == 0 {
			base = rep.ThroughputRPS
			r.Reference, r.Note = "none (absolute)", fmt.Sprintf("TTFT p50 %.2f ms", rep.TTFTMs.P50)
		} else {
			r.Reference, r.RefValue, r.Ratio = "ctx tp=1 -> gen tp=1", base, rep.ThroughputRPS/base
			r.Note = fmt.Sprintf("TTFT p50 %.2f ms", rep.TTFTMs.P50)
		}
		add(r)
	}
	if raw != "" {
		if eb, err := parseGoBench(filepath.Join(raw, "executor.txt")); err == nil {
			for _, gen := range []string{"tp=1", "tp=4"} {
				if v, ok := eb["ControlPlane/ctx=tp=1/gen="+gen]; ok {
					add(Row{Section: sec, Figure: fmt.Sprintf("go test BenchmarkControlPlane gen %s (%.0f requests)", gen, v["N"]), Value: v["req/s"], Unit: "req/s",
						Reference: "none (cross-check of the row above)", Allocs: ptr(v["allocs/op"]), Note: fmt.Sprintf("%.0f B/request", v["B/op"])})
				}
			}
		}
	}
	return nil
}
