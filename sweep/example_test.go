package sweep_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/launch"
	"github.com/rankrun/rankrun/sweep"
	"github.com/rankrun/rankrun/topology"
)

// A placement search from Go: every pair of a 3-GPU budget (the small
// default model; tp and dp only), each at two Poisson rates, run in
// simulation, and the pairs by goodput per GPU. Virtual time makes the
// answer exact, the same on any machine: a prefill of 128 tokens takes
// 2.56 ms, so one CTX rank serves under 400 requests/s and only the pair
// with two CTX ranks meets the SLO at 400.
func Example() {
	geom := topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}
	dims := sweep.Dims{TP: true, DP: true}
	pairs, err := sweep.Grid{GPUs: 3, Ctx: dims, Gen: dims}.Pairs(geom, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	var cells []*sweep.Cell
	for _, p := range pairs {
		for _, rate := range []float64{50, 400} {
			cells = append(cells, sweep.NewCell(executor.Config{Ctx: p.Ctx, Gen: p.Gen, Model: geom,
				PrefillPerToken: 20 * time.Microsecond, DecodePerStep: time.Millisecond,
				Workload: executor.Workload{Requests: 40, InputTokens: 128, OutputTokens: 4, Seed: 1,
					Arrival: executor.Arrival{Kind: executor.Poisson, Rate: rate}}}, 1))
		}
	}
	slo := goodput.SLO{TTFT: 10 * time.Millisecond, TPOT: 5 * time.Millisecond, Share: 0.9}
	run := func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
		return executor.Run(ctx, cfg, &launch.Sim{Config: sim.Config{Seed: cfg.Workload.Seed, Checked: true}})
	}
	done := sweep.Run(context.Background(), cells, sweep.Options{SLO: slo}, run)
	fmt.Println("pairs:", len(pairs), "cells run:", len(done))
	for _, g := range sweep.Ranked(sweep.Goodputs(done, slo)) {
		fmt.Printf("%-10s GPUs %d goodput %g req/s (%.1f per GPU)\n", g.Pair, g.GPUs, g.Rate, g.PerGPU)
	}
	// Output:
	// pairs: 5 cells run: 10
	// dp=2/tp=1  GPUs 3 goodput 400 req/s (133.3 per GPU)
	// tp=1/tp=1  GPUs 2 goodput 50 req/s (25.0 per GPU)
	// tp=1/dp=2  GPUs 3 goodput 50 req/s (16.7 per GPU)
	// tp=2/tp=1  GPUs 3 goodput 50 req/s (16.7 per GPU)
	// tp=1/tp=2  GPUs 3 goodput 50 req/s (16.7 per GPU)
}
