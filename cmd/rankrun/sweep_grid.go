package main

import (
	"flag"
	"slices"
	"strings"
	"time"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/goodput"
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
	fs.IntVar(&g.repeat, "repeat", 1, "run each cell N times (seeds --seed, --seed+1, ...) and report medians and the spread of TTFT p99")
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

var allDims = []string{"tp", "pp", "cp", "dp", "adp", "ep"}

// parseDims parses a --ctx-dims / --gen-dims list; "" is def.
func parseDims(flagName, v string, def []string) (map[string]bool, error) {
	if v == "" {
		v = strings.Join(def, ",")
	}
	out := map[string]bool{}
	for _, d := range strings.Split(v, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(allDims, d) {
			return nil, usagef("--%s %q: %q is not a dimension (use tp, pp, cp, dp, adp, ep, comma-separated)", flagName, v, d)
		}
		out[d] = true
	}
	return out, nil
}

// allows reports whether l uses only the dimensions in dims.
func allows(dims map[string]bool, l topology.Layout) bool {
	return (l.TP == 1 || dims["tp"]) && (l.PP == 1 || dims["pp"]) && (l.CP == 1 || dims["cp"]) && (l.DP == 1 || dims["dp"]) &&
		(!l.AttentionDP || dims["adp"]) && (l.EP <= 1 || dims["ep"])
}

// gridPairs lists the CTX/GEN pairs of the grid, CTX layouts in
// topology.Enumerate's order, then GEN: every pair of at most gpus ranks
// that can serve geom, that uses only the allowed dimensions and (with a
// cost model) whose weights fit each rank; past g.maxPairs, the first
// g.maxPairs+1 of them.
func (g *gridFlags) gridPairs(geom topology.Model, model *costmodel.Placement) ([][2]topology.Layout, error) {
	ctxDef, genDef := []string{"tp", "pp", "cp", "dp"}, []string{"tp", "pp", "dp"}
	if model != nil && model.Model.MoE() {
		ctxDef, genDef = append(ctxDef, "adp", "ep"), append(genDef, "adp", "ep")
	}
	cd, err := parseDims("ctx-dims", g.ctxDims, ctxDef)
	if err != nil {
		return nil, err
	}
	gd, err := parseDims("gen-dims", g.genDims, genDef)
	if err != nil {
		return nil, err
	}
	layouts := topology.Enumerate(geom, g.gpus-1)
	if cd["ep"] || gd["ep"] {
		if model == nil || !model.Model.MoE() {
			return nil, usagef("--ctx-dims/--gen-dims ep: expert parallelism needs a mixture-of-experts --model")
		}
		layouts = topology.WithExperts(layouts, model.Model.Experts)
	}
	var out [][2]topology.Layout
	for _, c := range layouts {
		for _, gl := range layouts {
			if c.Ranks()+gl.Ranks() > g.gpus || !allows(cd, c) || !allows(gd, gl) || !topology.Compatible(c, gl, geom) {
				continue
			}
			if model != nil && (model.Fits(c) != nil || model.Fits(gl) != nil) {
				continue
			}
			out = append(out, [2]topology.Layout{c, gl})
			if g.maxPairs > 0 && len(out) > g.maxPairs {
				return out, nil // more than the plan may hold: the caller refuses it
			}
		}
	}
	if len(out) == 0 {
		return nil, usagef("--gpus %d: no CTX/GEN pair of at most %d GPUs holds the model with the dimensions allowed", g.gpus, g.gpus)
	}
	return out, nil
}
