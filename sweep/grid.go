package sweep

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

// Dims is the set of parallel dimensions a layout may use. A layout uses
// a dimension when it is more than 1 (tp, pp, cp, dp, ep) or set (adp).
type Dims struct {
	TP, PP, CP, DP, ADP, EP bool
}

// DimNames are the dimensions' names, in ParseDims's spelling.
var DimNames = []string{"tp", "pp", "cp", "dp", "adp", "ep"}

// ParseDims parses a comma-separated list of dimension names.
func ParseDims(v string) (Dims, error) {
	var d Dims
	for _, n := range strings.Split(v, ",") {
		switch strings.TrimSpace(n) {
		case "tp":
			d.TP = true
		case "pp":
			d.PP = true
		case "cp":
			d.CP = true
		case "dp":
			d.DP = true
		case "adp":
			d.ADP = true
		case "ep":
			d.EP = true
		default:
			return Dims{}, fmt.Errorf("%q is not a dimension (use %s, comma-separated)", strings.TrimSpace(n), strings.Join(DimNames, ", "))
		}
	}
	return d, nil
}

func (d Dims) String() string {
	var out []string
	for i, on := range []bool{d.TP, d.PP, d.CP, d.DP, d.ADP, d.EP} {
		if on {
			out = append(out, DimNames[i])
		}
	}
	return strings.Join(out, ",")
}

// Allows reports whether l uses only the dimensions in d.
func (d Dims) Allows(l topology.Layout) bool {
	return (l.TP == 1 || d.TP) && (l.PP == 1 || d.PP) && (l.CP == 1 || d.CP) && (l.DP == 1 || d.DP) &&
		(!l.AttentionDP || d.ADP) && (l.EP <= 1 || d.EP)
}

// DefaultDims are the dimensions a grid tries when not told: CTX from tp,
// pp, cp and dp, GEN from tp, pp and dp (context parallelism splits a
// prompt, which decode does not have); adp and ep on both sides for a
// mixture-of-experts model.
func DefaultDims(moe bool) (ctx, gen Dims) {
	ctx, gen = Dims{TP: true, PP: true, CP: true, DP: true}, Dims{TP: true, PP: true, DP: true}
	if moe {
		ctx.ADP, ctx.EP, gen.ADP, gen.EP = true, true, true, true
	}
	return ctx, gen
}

// Pair is a CTX layout and a GEN layout, a disaggregated placement.
type Pair struct {
	Ctx, Gen topology.Layout
}

// GPUs is the ranks of both sides.
func (p Pair) GPUs() int { return p.Ctx.Ranks() + p.Gen.Ranks() }

// String is CTX/GEN, each as topology.Layout prints it.
func (p Pair) String() string { return p.Ctx.String() + "/" + p.Gen.String() }

// ErrExpertsNeedMoE is Pairs's refusal of ep in the dimensions without a
// mixture-of-experts model.
var ErrExpertsNeedMoE = errors.New("expert parallelism (ep) needs a mixture-of-experts model")

// ErrNoPair is Pairs's answer when the budget holds no pair.
var ErrNoPair = errors.New("no CTX/GEN pair of the budget holds the model with the dimensions allowed")

// Grid is the placement search's grid: every CTX/GEN pair of at most GPUs
// ranks in all.
type Grid struct {
	GPUs int // at most this many in all, CTX and GEN; at least 2
	// Ctx and Gen are the dimensions each side may use; the zero Dims
	// means DefaultDims.
	Ctx, Gen Dims
	// MaxPairs stops the enumeration past this many pairs (0: no bound):
	// Pairs then returns the first MaxPairs+1, so that a caller can tell
	// a plan too large to run without listing it all.
	MaxPairs int
}

// Pairs lists the grid's pairs, CTX layouts in topology.Enumerate's
// order, then GEN: every pair of at most g.GPUs ranks that can serve geom
// (topology.Compatible), that uses only the allowed dimensions and, with
// a placement, whose weights fit each rank and whose TP splits the
// model's attention heads (Placement.CheckHeads). With ep allowed (an MoE
// placement is then required) each layout is also tried with every ep
// that divides its FFN ranks and the model's experts.
func (g Grid) Pairs(geom topology.Model, place *costmodel.Placement) ([]Pair, error) {
	if g.GPUs < 2 || g.GPUs > topology.MaxRanks {
		return nil, fmt.Errorf("sweep: grid GPUs = %d: must be in [2, %d] (a pair needs one CTX and one GEN rank)", g.GPUs, topology.MaxRanks)
	}
	moe := place != nil && place.Model.MoE()
	cd, gd := DefaultDims(moe)
	if g.Ctx != (Dims{}) {
		cd = g.Ctx
	}
	if g.Gen != (Dims{}) {
		gd = g.Gen
	}
	layouts := topology.Enumerate(geom, g.GPUs-1)
	if cd.EP || gd.EP {
		if !moe {
			return nil, ErrExpertsNeedMoE
		}
		layouts = topology.WithExperts(layouts, place.Model.Experts)
	}
	var out []Pair
	for _, c := range layouts {
		for _, gl := range layouts {
			if c.Ranks()+gl.Ranks() > g.GPUs || !cd.Allows(c) || !gd.Allows(gl) || !topology.Compatible(c, gl, geom) {
				continue
			}
			if place != nil && (place.Fits(c) != nil || place.Fits(gl) != nil || place.CheckHeads(c) != nil || place.CheckHeads(gl) != nil) {
				continue
			}
			out = append(out, Pair{c, gl})
			if g.MaxPairs > 0 && len(out) > g.MaxPairs {
				return out, nil // more than the plan may hold: the caller refuses it
			}
		}
	}
	if len(out) == 0 {
		return nil, ErrNoPair
	}
	return out, nil
}
