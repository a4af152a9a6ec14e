package topology_test

import (
	"fmt"
	"math"
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

// Parts, worked by hand: small routings whose expected part count is a
// fraction, and DeepSeek-V3's (256 experts, 8 a token, 4 of 8 groups)
// written as the hypergeometric sum over how many of a part's groups a
// token picks.
func TestRoutingPartsClosedForm(t *testing.T) {
	for _, c := range []struct {
		r     topology.Routing
		parts int
		want  float64
	}{
		{topology.Routing{Experts: 8, TopK: 1}, 4, 1},
		{topology.Routing{Experts: 8, TopK: 2}, 4, 4 * (1 - choose(6, 2)/choose(8, 2))}, // 13/7
		{topology.Routing{Experts: 8, TopK: 2}, 1, 1},
		// One group of two a token: both picks in it, so in one part when
		// a part holds whole groups.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 1}, 4, 1},
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 1}, 2, 1},
		// ... and in one or two of the two parts that split a group.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 1}, 8, 2},
		{topology.Routing{Experts: 16, TopK: 2, Groups: 4, GroupsPerToken: 1}, 8, 2 * (1 - choose(2, 2)/choose(4, 2))}, // 5/3
		// Two of four groups: a part (one group) is picked with chance
		// 1/2, then touched unless both picks are in the other group.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 2}, 4, 4 * 0.5 * (1 - choose(2, 2)/choose(4, 2))}, // 5/3
		// A part of two groups holds j of the token's two: 0, 1 or 2
		// with chances 1/6, 4/6, 1/6.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 2}, 2, 2 * (1 - (1.0/6 + 4.0/6*choose(2, 2)/choose(4, 2)))}, // 13/9
		// Groups that straddle parts: 12 experts in 3 groups of 4 over 2
		// parts of 6; one group a token, both picks in it. Part 0 holds
		// group 0 and half of group 1.
		{topology.Routing{Experts: 12, TopK: 2, Groups: 3, GroupsPerToken: 1}, 2,
			(1.0/3 + 1.0/3*(1-choose(2, 2)/choose(4, 2))) + (1.0/3*(1-choose(2, 2)/choose(4, 2)) + 1.0/3)},
		// Every group open: as no groups.
		{topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 4}, 4, 4 * (1 - choose(6, 2)/choose(8, 2))},
	} {
		t.Run(fmt.Sprintf("%+v/%d", c.r, c.parts), func(t *testing.T) {
			require.NoError(t, c.r.Validate(c.parts))
			assert.InDelta(t, c.want, c.r.Parts(c.parts), 1e-12)
		})
	}
	ds := topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}
	for _, parts := range []int{2, 4, 8} {
		held := 8 / parts // groups a part holds
		var miss float64
		for j := 0; j <= min(held, 4); j++ {
			miss += choose(held, j) * choose(8-held, 4-j) / choose(8, 4) * choose(128-32*j, 8) / choose(128, 8)
		}
		assert.InDelta(t, float64(parts)*(1-miss), ds.Parts(parts), 1e-9, "deepseek over %d parts", parts)
	}
	// Group-limited routing sends a DeepSeek token to fewer EP parts than
	// routing over every expert would: 3.62 of 8 against 5.29.
	free := topology.Routing{Experts: 256, TopK: 8}
	assert.InDelta(t, 3.62, ds.Parts(8), 0.01)
	assert.InDelta(t, 5.29, free.Parts(8), 0.01)
}

// Pick is Parts' routing: over many tokens the mean distinct parts is
// Parts (within four standard errors), every token's experts are
// distinct and sit in at most GroupsPerToken groups, and a key always
// routes alike.
func TestRoutingPickIsParts(t *testing.T) {
	for _, c := range []struct {
		r     topology.Routing
		parts int
	}{
		{topology.Routing{Experts: 256, TopK: 8}, 8},
		{topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}, 4},
		{topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}, 8},
		{topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}, 32},
		{topology.Routing{Experts: 96, TopK: 6, Groups: 8, GroupsPerToken: 2}, 3},
		{topology.Routing{Experts: 64, TopK: 6, Groups: 16, GroupsPerToken: 2}, 64},
	} {
		t.Run(fmt.Sprintf("%+v/%d", c.r, c.parts), func(t *testing.T) {
			require.NoError(t, c.r.Validate(c.parts))
			per := c.r.Experts / c.parts
			experts, groups := make([]int, c.r.TopK), make([]int, c.r.GroupsPerToken)
			const n = 10000
			var sum, sq float64
			for key := range uint64(n) {
				c.r.Pick(key, experts, groups)
				seen, inGroups, inParts := map[int]bool{}, map[int]bool{}, map[int]bool{}
				for _, e := range experts {
					require.False(t, seen[e], "key %d: expert %d twice", key, e)
					require.True(t, e >= 0 && e < c.r.Experts)
					seen[e] = true
					inParts[e/per] = true
					if c.r.Groups > 0 {
						inGroups[e/(c.r.Experts/c.r.Groups)] = true
					}
				}
				if c.r.Groups > 0 {
					require.LessOrEqual(t, len(inGroups), c.r.GroupsPerToken, "key %d: experts %v", key, experts)
				}
				x := float64(len(inParts))
				sum, sq = sum+x, sq+x*x
				again := make([]int, c.r.TopK)
				c.r.Pick(key, again, make([]int, c.r.GroupsPerToken))
				require.Equal(t, experts, again)
			}
			mean := sum / n
			se := math.Sqrt((sq/n - mean*mean) / n)
			assert.InDelta(t, c.r.Parts(c.parts), mean, 4*se+1e-9, "mean parts a token")
		})
	}
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
