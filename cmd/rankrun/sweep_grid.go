package main

import (
	"errors"
	"flag"
	"time"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/sweep"
	"github.com/rankrun/rankrun/topology"
)

// gridFlags are a sweep's generated grid, its SLOs and its repeats.
type gridFlags struct {
	gpus             int
	ctxDims, genDims string
	slo              slo
	repeat, jobs     int
	// maxPairs stops the grid's enumeration past this many pairs (0: no
	// bound): a plan that large is refused anyway, without --yes.
	maxPairs int
}

// slo is a service-level objective: a request meets it when its TTFT and
// its TPOT are within bounds; a run meets it when Share of its requests do
// (DistServe's SLO attainment).
type slo = goodput.SLO

func (g *gridFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&g.gpus, "gpus", 0, "sweep every CTX/GEN layout pair of at most N GPUs in all (instead of --pair): each side's layouts from tp, pp, cp, dp "+
		"(powers of two) that hold the model, compatible pairs only; with --model, only those whose weights fit")
	fs.StringVar(&g.ctxDims, "ctx-dims", "", "--gpus: the parallel dimensions a CTX layout may use, from tp,pp,cp,dp,adp,ep (default tp,pp,cp,dp; adp and ep too for an MoE --model)")
	fs.StringVar(&g.genDims, "gen-dims", "", "--gpus: the same for GEN (default tp,pp,dp; adp and ep too for an MoE --model)")
	fs.DurationVar(&g.slo.TTFT, "slo-ttft", 500*time.Millisecond, "SLO: a request's time to first token at most this")
	fs.DurationVar(&g.slo.TPOT, "slo-tpot", 50*time.Millisecond, "SLO: a request's time per output token after the first at most this")
	fs.Float64Var(&g.slo.Share, "slo-share", 0.9, "SLO: the share of requests that must meet both bounds, in (0,1]; goodput is the highest --arrival rate that does")
	fs.IntVar(&g.repeat, "repeat", 1, "run each cell N times (>= 1, at most 1000; seeds --seed, --seed+1, ...) and report medians and the spread of TTFT p99")
	fs.IntVar(&g.jobs, "jobs", 0, "cells run at once (0: one per CPU under --backend sim, 1 otherwise)")
}

func (g *gridFlags) validate() error {
	switch {
	case g.gpus < 0 || g.gpus > topology.MaxRanks:
		return usagef("--gpus %d: must be in [2, %d] (0: use --pair)", g.gpus, topology.MaxRanks)
	case g.gpus == 1:
		return usagef("--gpus 1: a disaggregated pair needs at least 2 GPUs (one CTX, one GEN)")
	case g.slo.TTFT <= 0:
		return usagef("--slo-ttft %v: must be positive", g.slo.TTFT)
	case g.slo.TPOT <= 0:
		return usagef("--slo-tpot %v: must be positive", g.slo.TPOT)
	case !(g.slo.Share > 0 && g.slo.Share <= 1):
		return usagef("--slo-share %v: must be in (0, 1]", g.slo.Share)
	case g.repeat < 1 || g.repeat > 1000:
		return usagef("--repeat %d: must be in [1, 1000]", g.repeat)
	case g.jobs < 0:
		return usagef("--jobs %d: must not be negative (0: automatic)", g.jobs)
	}
	return nil
}

// gridPairs lists the CTX/GEN pairs of the grid (sweep.Grid.Pairs), its
// refusals named by the flags.
func (g *gridFlags) gridPairs(geom topology.Model, model *costmodel.Placement) ([]sweep.Pair, error) {
	grid := sweep.Grid{GPUs: g.gpus, MaxPairs: g.maxPairs}
	for _, d := range []struct {
		flag, v string
		to      *sweep.Dims
	}{{"ctx-dims", g.ctxDims, &grid.Ctx}, {"gen-dims", g.genDims, &grid.Gen}} {
		if d.v == "" {
			continue // the defaults
		}
		dims, err := sweep.ParseDims(d.v)
		if err != nil {
			return nil, usagef("--%s %q: %v", d.flag, d.v, err)
		}
		*d.to = dims
	}
	pairs, err := grid.Pairs(geom, model)
	switch {
	case errors.Is(err, sweep.ErrExpertsNeedMoE):
		return nil, usagef("--ctx-dims/--gen-dims ep: expert parallelism needs a mixture-of-experts --model")
	case errors.Is(err, sweep.ErrNoPair):
		return nil, usagef("--gpus %d: no CTX/GEN pair of at most %d GPUs holds the model with the dimensions allowed", g.gpus, g.gpus)
	case err != nil:
		return nil, usagef("--gpus %d: %v", g.gpus, err)
	}
	return pairs, nil
}
