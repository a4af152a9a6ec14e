package topology_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// choose is C(n, k) as a float.
func choose(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	c := 1.0
	for i := range k {
		c = c * float64(n-i) / float64(i+1)
	}
	return c
}

// Parts, worked by hand. Without groups a token's experts are a uniform
// subset, and Parts is exact. With one group a token, its experts are the
// best of that group's, a uniform subset of the group by symmetry, so the
// parts they reach follow from where the group sits (Parts' sample mean
// is within 0.02 of it).
func TestRoutingPartsClosedForm(t *testing.T) {
	for _, c := range []struct {
		r     topology.Routing
		parts int
		want  float64
		delta float64
	}{
		{topology.Routing{Experts: 8, TopK: 1}, 4, 1, 1e-12},
		{topology.Routing{Experts: 8, TopK: 2}, 4, 4 * (1 - choose(6, 2)/choose(8, 2)), 1e-12}, // 13/7
		{topology.Routing{Experts: 8, TopK: 2}, 1, 1, 1e-12},
		{topology.Routing{Experts: 256, TopK: 8}, 8, 8 * (1 - choose(224, 8)/choose(256, 8)), 1e-12},
		// Every group open: as no groups, exactly.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 4}, 4, 4 * (1 - choose(6, 2)/choose(8, 2)), 1e-12},
		// One group of two a token: both picks in it, so in one part when
		// a part holds whole groups ...
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 1}, 4, 1, 0},
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 1}, 2, 1, 0},
		// ... and in two when every expert is a part.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 1}, 8, 2, 0},
		// Two of a group's four, its two parts of two: in one part with
		// chance 2/C(4,2).
		{topology.Routing{Experts: 16, TopK: 2, Groups: 4, GroupsPerToken: 1}, 8, 2 - 2/choose(4, 2), 0.02}, // 5/3
		// Two groups of eight, one a token, its best 3: two parts of four
		// each group.
		{topology.Routing{Experts: 16, TopK: 3, Groups: 2, GroupsPerToken: 1}, 4, 2 * (1 - choose(4, 3)/choose(8, 3)), 0.02},
		// Groups that straddle parts: 12 experts in 3 groups of 4 over 2
		// parts of 6; one group a token, its best 2. Part 0 holds group 0
		// and half of group 1.
		{topology.Routing{Experts: 12, TopK: 2, Groups: 3, GroupsPerToken: 1}, 2,
			2 * (1.0/3 + 1.0/3*(1-choose(2, 2)/choose(4, 2))), 0.02}, // 11/9
	} {
		t.Run(fmt.Sprintf("%+v/%d", c.r, c.parts), func(t *testing.T) {
			require.NoError(t, c.r.Validate(c.parts))
			assert.InDelta(t, c.want, c.r.Parts(c.parts), c.delta+1e-12)
		})
	}
}

// deepSeek is an independent implementation of DeepSeek-V3's
// group-limited router over uniform scores (the "noaux_tc" rule: a
// group's score is its best two experts' sum; the token's TopK best
// experts of its GroupsPerToken best groups), on its own random numbers:
// the parts its token reaches.
func deepSeek(r topology.Routing, parts int, rng *rand.Rand) int {
	size := r.Experts / r.Groups
	score := make([]float64, r.Experts)
	for e := range score {
		score[e] = rng.Float64()
	}
	groups := make([]int, r.Groups)
	gscore := make([]float64, r.Groups)
	for g := range groups {
		groups[g] = g
		s := slices.Clone(score[g*size : (g+1)*size])
		slices.Sort(s)
		gscore[g] = s[len(s)-1]
		if len(s) > 1 {
			gscore[g] += s[len(s)-2]
		}
	}
	slices.SortFunc(groups, func(a, b int) int { return -cmpF(gscore[a], gscore[b]) })
	var pool []int
	for _, g := range groups[:r.GroupsPerToken] {
		for e := g * size; e < (g+1)*size; e++ {
			pool = append(pool, e)
		}
	}
	slices.SortFunc(pool, func(a, b int) int { return -cmpF(score[a], score[b]) })
	reached := map[int]bool{}
	for _, e := range pool[:r.TopK] {
		reached[e/(r.Experts/parts)] = true
	}
	return len(reached)
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Parts (and so Pick, whose routing it averages) is DeepSeek's router:
// against an independent implementation on its own random numbers, the
// mean parts a token reaches agree within four standard errors, for
// groups aligned with parts, straddling them, more parts than groups and
// fewer, two groups, and all groups but one open. Every Pick's experts
// are distinct and in at most GroupsPerToken groups, and a key always
// routes alike. DeepSeek-R1 over 8 EP parts reaches 3.95 (uniform over
// every expert would be 5.29; random groups, then uniform within them,
// 3.63).
func TestRoutingPartsIsDeepSeeks(t *testing.T) {
	ds := topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}
	for _, c := range []struct {
		r     topology.Routing
		parts int
	}{
		{ds, 4}, {ds, 8}, {ds, 32},
		{topology.Routing{Experts: 96, TopK: 6, Groups: 8, GroupsPerToken: 2}, 3},
		{topology.Routing{Experts: 64, TopK: 6, Groups: 16, GroupsPerToken: 2}, 64},
		{topology.Routing{Experts: 16, TopK: 4, Groups: 2, GroupsPerToken: 1}, 8},
		{topology.Routing{Experts: 32, TopK: 4, Groups: 4, GroupsPerToken: 3}, 8},
		{topology.Routing{Experts: 32, TopK: 4, Groups: 4, GroupsPerToken: 3}, 2},
	} {
		t.Run(fmt.Sprintf("%+v/%d", c.r, c.parts), func(t *testing.T) {
			require.NoError(t, c.r.Validate(c.parts))
			rng := rand.New(rand.NewPCG(uint64(c.r.Experts), uint64(c.parts)))
			const n = 20000
			var sum, sq float64
			for range n {
				x := float64(deepSeek(c.r, c.parts, rng))
				sum, sq = sum+x, sq+x*x
			}
			mean := sum / n
			sd := math.Sqrt(sq/n - mean*mean)
			// Parts is a mean over 8192 tokens: both samples' errors.
			se := sd * math.Sqrt(1.0/n+1.0/8192)
			assert.InDelta(t, mean, c.r.Parts(c.parts), 4*se+1e-9, "mean parts a token (independent: %.4f)", mean)

			size := c.r.Experts / c.r.Groups
			experts, scratch := make([]int, c.r.TopK), make([]uint64, c.r.ScratchLen())
			for key := range uint64(2000) {
				c.r.Pick(key, experts, scratch)
				groups := map[int]bool{}
				for i, e := range experts {
					require.True(t, e >= 0 && e < c.r.Experts && !slices.Contains(experts[:i], e), "key %d: %v", key, experts)
					groups[e/size] = true
				}
				require.LessOrEqual(t, len(groups), c.r.GroupsPerToken, "key %d: experts %v", key, experts)
				again := make([]int, c.r.TopK)
				c.r.Pick(key, again, make([]uint64, c.r.ScratchLen()))
				require.Equal(t, experts, again)
			}
		})
	}
	assert.InDelta(t, 3.95, ds.Parts(8), 0.02)
	assert.InDelta(t, 5.29, topology.Routing{Experts: 256, TopK: 8}.Parts(8), 0.01)
}

// Without groups Pick is a uniform subset: its mean parts is Parts'
// exact figure, and its experts are distinct.
func TestRoutingPickUngrouped(t *testing.T) {
	r := topology.Routing{Experts: 256, TopK: 8}
	experts := make([]int, r.TopK)
	const n = 20000
	var sum, sq float64
	for key := range uint64(n) {
		r.Pick(key, experts, nil)
		parts := map[int]bool{}
		for i, e := range experts {
			require.False(t, slices.Contains(experts[:i], e))
			parts[e/32] = true
		}
		x := float64(len(parts))
		sum, sq = sum+x, sq+x*x
	}
	mean := sum / n
	assert.InDelta(t, r.Parts(8), mean, 4*math.Sqrt((sq/n-mean*mean)/n))
}

// Bad routing names its field and rule.
func TestRoutingRefusals(t *testing.T) {
	for _, c := range []struct {
		r     topology.Routing
		parts int
		want  string
	}{
		{topology.Routing{}, 1, "routing: experts = 0: must be > 0"},
		{topology.Routing{Experts: 6, TopK: 2}, 4, "experts = 6: the 4 EP parts must divide it"},
		{topology.Routing{Experts: 8, TopK: 2}, 0, "experts = 8: the 0 EP parts must divide it"},
		{topology.Routing{Experts: 8, TopK: 9}, 1, "experts per token = 9: must be in [1, experts (8)]"},
		{topology.Routing{Experts: 8, TopK: 0}, 1, "experts per token = 0"},
		{topology.Routing{Experts: 8, TopK: 2, Groups: 3, GroupsPerToken: 1}, 1, "groups = 3: must be 0 (none) or divide experts (8)"},
		{topology.Routing{Experts: 8, TopK: 2, Groups: -1}, 1, "groups = -1"},
		{topology.Routing{Experts: 8, TopK: 2, Groups: 16, GroupsPerToken: 1}, 1, "groups = 16"},
		{topology.Routing{Experts: 8, TopK: 2, GroupsPerToken: 1}, 1, "groups per token = 1: must be 0 without groups"},
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4}, 1, "groups per token = 0: must be in [1, groups (4)]"},
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 5}, 1, "groups per token = 5"},
		{topology.Routing{Experts: 8, TopK: 3, Groups: 4, GroupsPerToken: 1}, 1, "groups per token = 1: its groups hold 2 experts, fewer than the 3 a token picks"},
	} {
		err := c.r.Validate(c.parts)
		require.ErrorIs(t, err, topology.ErrInvalidModel, "%+v", c.r)
		assert.ErrorContains(t, err, c.want)
	}
}

// A large grouped model prices in bounded time and never NaN (a review
// found the exact count of group subsets overflowing at 1100 groups).
func TestRoutingPartsLarge(t *testing.T) {
	r := topology.Routing{Experts: 1100, TopK: 8, Groups: 1100, GroupsPerToken: 550}
	require.NoError(t, r.Validate(4))
	v := r.Parts(4)
	assert.False(t, math.IsNaN(v))
	assert.InDelta(t, 4*(1-math.Pow(0.75, 8)), v, 0.1, "8 experts of 550 open groups, one expert each")
}
