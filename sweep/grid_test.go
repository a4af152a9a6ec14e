package sweep

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

func hardware(t *testing.T, name string) costmodel.Hardware {
	t.Helper()
	hw, err := costmodel.ParseHardware(name)
	require.NoError(t, err)
	return hw
}

func TestParseDims(t *testing.T) {
	d, err := ParseDims("tp, dp,adp")
	require.NoError(t, err)
	assert.Equal(t, Dims{TP: true, DP: true, ADP: true}, d)
	assert.Equal(t, "tp,dp,adp", d.String())
	_, err = ParseDims("tp,xp")
	require.EqualError(t, err, `"xp" is not a dimension (use tp, pp, cp, dp, adp, ep, comma-separated)`)
	_, err = ParseDims("")
	require.Error(t, err, "an empty list names no dimension")
}

// The grid of a 4-GPU budget on a dense model, restated from its rule:
// every pair of at most 4 ranks, CTX from tp, pp, cp, dp and GEN from tp,
// pp, dp, compatible, whose weights fit; nothing else.
func TestGridPairs(t *testing.T) {
	m := costmodel.Models["llama-3-8b"]
	hw := hardware(t, "h100")
	place := &costmodel.Placement{Model: m, HW: hw}
	geom := m.Geometry(16)
	pairs, err := Grid{GPUs: 4}.Pairs(geom, place)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, p := range pairs {
		assert.LessOrEqual(t, p.GPUs(), 4)
		assert.Equal(t, 1, p.Gen.CP, "GEN never uses cp by default: %s", p)
		assert.False(t, p.Ctx.AttentionDP || p.Gen.AttentionDP, "no adp on a dense model: %s", p)
		got[p.String()] = true
	}
	want := 0
	layouts := topology.Enumerate(geom, 3)
	for _, c := range layouts {
		for _, g := range layouts {
			if c.Ranks()+g.Ranks() <= 4 && !c.AttentionDP && !g.AttentionDP && g.CP == 1 && topology.Compatible(c, g, geom) &&
				place.Fits(c) == nil && place.Fits(g) == nil {
				want++
				assert.True(t, got[Pair{c, g}.String()], "missing %s/%s", c, g)
			}
		}
	}
	assert.Len(t, pairs, want)
	for _, p := range []string{"tp=1/tp=1", "cp=2/tp=2", "tp=1/pp=2", "dp=2/tp=2", "tp=2/dp=2"} {
		assert.True(t, got[p], "missing %s", p)
	}

	// Llama-3-70B on six H100s: many candidates fit on one side only
	// (tp=1 holds no 70B in 16 bits), so each side's weight check shows.
	m70 := costmodel.Models["llama-3-70b"]
	p70 := &costmodel.Placement{Model: m70, HW: hardware(t, "h100")}
	g70 := m70.Geometry(16)
	got70, err := Grid{GPUs: 6}.Pairs(g70, p70)
	require.NoError(t, err)
	want70 := map[string]bool{}
	oneSided := 0
	l70 := topology.Enumerate(g70, 5)
	for _, c := range l70 {
		for _, g := range l70 {
			if c.Ranks()+g.Ranks() > 6 || c.AttentionDP || g.AttentionDP || g.CP > 1 || !topology.Compatible(c, g, g70) {
				continue
			}
			if (p70.Fits(c) == nil) != (p70.Fits(g) == nil) {
				oneSided++
			}
			if p70.Fits(c) == nil && p70.Fits(g) == nil {
				want70[Pair{c, g}.String()] = true
			}
		}
	}
	require.Positive(t, oneSided, "the case must have pairs that fit on one side only")
	var names70 []string
	for _, p := range got70 {
		names70 = append(names70, p.String())
		assert.True(t, want70[p.String()], "%s: a side's weights do not fit", p)
	}
	assert.Len(t, names70, len(want70))

	// Only tp on both sides.
	tpOnly, err := Grid{GPUs: 4, Ctx: Dims{TP: true}, Gen: Dims{TP: true}}.Pairs(geom, place)
	require.NoError(t, err)
	for _, p := range tpOnly {
		assert.True(t, p.Ctx.Ranks() == p.Ctx.TP && p.Gen.Ranks() == p.Gen.TP, "%s", p)
	}
	assert.Less(t, len(tpOnly), len(pairs))

	// MaxPairs stops the enumeration one past the bound.
	capped, err := Grid{GPUs: 4, MaxPairs: 3}.Pairs(geom, place)
	require.NoError(t, err)
	assert.Len(t, capped, 4)
	assert.Equal(t, pairs[:4], capped)
}

func TestGridRefusals(t *testing.T) {
	dense := costmodel.Models["llama-3-70b"]
	place := &costmodel.Placement{Model: dense, HW: hardware(t, "h100")}
	_, err := Grid{GPUs: 2}.Pairs(dense.Geometry(16), place)
	assert.ErrorIs(t, err, ErrNoPair, "70B in 16-bit does not fit one H100 a side")
	_, err = Grid{GPUs: 4, Ctx: Dims{TP: true, EP: true}}.Pairs(dense.Geometry(16), place)
	assert.ErrorIs(t, err, ErrExpertsNeedMoE)
	_, err = Grid{GPUs: 4, Ctx: Dims{EP: true}}.Pairs(topology.DefaultModel(), nil)
	assert.ErrorIs(t, err, ErrExpertsNeedMoE, "no placement: no model to have experts")
	_, err = Grid{GPUs: 1}.Pairs(topology.DefaultModel(), nil)
	assert.EqualError(t, err, "sweep: grid GPUs = 1: must be in [2, 1048576] (a pair needs one CTX and one GEN rank)")
}

// On an MoE model ep is tried where allowed: every ep that divides a
// layout's FFN ranks and the experts.
func TestGridExperts(t *testing.T) {
	m := costmodel.Models["gpt-oss-120b"]
	place := &costmodel.Placement{Model: m, HW: hardware(t, "gb200")}
	pairs, err := Grid{GPUs: 3}.Pairs(m.Geometry(16), place)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, p := range pairs {
		got[p.String()] = true
		for _, l := range []topology.Layout{p.Ctx, p.Gen} {
			if l.EP > 1 {
				assert.NoError(t, place.CheckExperts(l), "%s", l)
			}
		}
	}
	for _, want := range []string{"tp=2,ep=2/tp=1", "dp=2,ep=2,adp/tp=1", "tp=1/tp=2,ep=2", "tp=2/tp=1"} {
		assert.True(t, got[want], "missing %s", want)
	}
	// ep allowed on CTX only: no GEN layout uses it.
	ctxOnly, err := Grid{GPUs: 3, Ctx: Dims{TP: true, DP: true, ADP: true, EP: true}, Gen: Dims{TP: true}}.Pairs(m.Geometry(16), place)
	require.NoError(t, err)
	sawCtxEP := false
	for _, p := range ctxOnly {
		assert.LessOrEqual(t, p.Gen.EP, 1, "GEN may not use ep: %s", p)
		sawCtxEP = sawCtxEP || p.Ctx.EP > 1
	}
	assert.True(t, sawCtxEP, "CTX tries ep")
}

// A grid tries only the TP degrees that split the model's attention
// heads: a model of 24 query heads over 8 KV heads (a user's file may
// describe one) has its KV heads duplicate over tp = 16 and 32, which the
// geometry lets through, but its query heads do not split over them.
func TestGridSplitsAttentionHeads(t *testing.T) {
	m := costmodel.Models["llama-3-8b"]
	m.Name, m.Heads = "heads-24", 24
	require.NoError(t, m.Validate())
	place := &costmodel.Placement{Model: m, HW: hardware(t, "h100")}
	tp := Dims{TP: true}
	tps := func(pairs []Pair) map[int]bool {
		seen := map[int]bool{}
		for _, p := range pairs {
			seen[p.Ctx.TP], seen[p.Gen.TP] = true, true
		}
		return seen
	}
	pairs, err := Grid{GPUs: 33, Ctx: tp, Gen: tp}.Pairs(m.Geometry(16), place)
	require.NoError(t, err)
	assert.Equal(t, map[int]bool{1: true, 2: true, 4: true, 8: true}, tps(pairs))
	withoutModel, err := Grid{GPUs: 33, Ctx: tp, Gen: tp}.Pairs(m.Geometry(16), nil)
	require.NoError(t, err)
	assert.Equal(t, map[int]bool{1: true, 2: true, 4: true, 8: true, 16: true, 32: true}, tps(withoutModel),
		"the geometry alone lets tp = 16 and 32 through")
}
