package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnumerate(t *testing.T) {
	m := DefaultModel() // 8 layers, 8 heads
	got := Enumerate(m, 8)
	seen := map[string]bool{}
	families := map[string]bool{}
	for _, l := range got {
		require.NoError(t, l.ValidateFor(m), "%s", l)
		require.LessOrEqual(t, l.Ranks(), 8, "%s", l)
		require.False(t, seen[l.String()], "duplicate %s", l)
		seen[l.String()] = true
		families[l.Family()] = true
		p, err := ParseLayout(l.String())
		require.NoError(t, err)
		require.Equal(t, l, p)
	}
	// Brute force over every size 1..8 (not only powers of two) keeps
	// the powers of two: exactly the enumerated set.
	n := 0
	for tp := 1; tp <= 8; tp++ {
		for pp := 1; pp <= 8; pp++ {
			for cp := 1; cp <= 8; cp++ {
				for dp := 1; dp <= 8; dp++ {
					for _, adp := range []bool{false, true} {
						l := Layout{tp, pp, cp, dp, adp, 0}
						pow2 := func(v int) bool { return v&(v-1) == 0 }
						if l.Ranks() > 8 || (adp && dp < 2) || l.ValidateFor(m) != nil || !pow2(tp) || !pow2(pp) || !pow2(cp) || !pow2(dp) {
							continue
						}
						n++
						assert.True(t, seen[l.String()], "missing %s", l)
					}
				}
			}
		}
	}
	assert.Equal(t, n, len(got))
	for _, f := range []string{"single", "tp", "pp", "cp", "dp", "dp+adp", "tp+dp+adp", "pp+dp+adp", "cp+dp+adp", "tp+pp+cp", "tp+pp+dp+adp"} {
		assert.True(t, families[f], "family %s missing", f)
	}
	for i := 1; i < len(got); i++ {
		assert.LessOrEqual(t, got[i-1].Ranks(), got[i].Ranks(), "order")
	}
}

func TestFamilyAndCompatible(t *testing.T) {
	assert.Equal(t, "single", MustParseLayout("tp=1").Family())
	assert.Equal(t, "tp+cp+dp+adp", MustParseLayout("tp=2,cp=2,dp=2,adp").Family())
	assert.Equal(t, "tp+ep", MustParseLayout("tp=8,ep=8").Family(), "not tp=8's family")
	assert.Equal(t, "dp+adp+ep", MustParseLayout("dp=4,ep=4,adp").Family())
	m := DefaultModel()
	assert.True(t, Compatible(MustParseLayout("cp=2"), MustParseLayout("cp=4"), m))
	assert.True(t, Compatible(MustParseLayout("tp=2,dp=2,adp"), MustParseLayout("pp=2,dp=2,adp"), m))
	assert.False(t, Compatible(Layout{TP: 1, PP: 1, CP: 3, DP: 1}, MustParseLayout("cp=2"), m))
}

// Compatible is exactly Map's verdict, over every pair of layouts of up to
// 16 ranks of two models (one whose heads and layers some layouts cannot
// split).
func TestCompatibleIsMapsVerdict(t *testing.T) {
	for _, m := range []Model{DefaultModel(), {Layers: 6, KVHeads: 3, HeadDim: 8, TokensPerBlock: 4, ElemBytes: 2}} {
		ls := Enumerate(DefaultModel(), 16)
		ls = append(ls, Layout{TP: 1, PP: 1, CP: 3, DP: 1}, Layout{TP: 3, PP: 1, CP: 1, DP: 1})
		agree, yes := 0, 0
		for _, c := range ls {
			for _, g := range ls {
				_, err := Map(c, g, m)
				require.Equal(t, err == nil, Compatible(c, g, m), "%s -> %s on %+v: %v", c, g, m, err)
				agree++
				if err == nil {
					yes++
				}
			}
		}
		assert.Positive(t, yes)
		assert.Less(t, yes, agree, "both verdicts occur")
	}
}

// WithExperts adds every power-of-two ep that divides a layout's FFN ranks
// and the experts, each variant valid, and nothing for one FFN rank.
func TestWithExperts(t *testing.T) {
	ls := []Layout{MustParseLayout("tp=1"), MustParseLayout("tp=8"), MustParseLayout("dp=4,adp"), MustParseLayout("tp=2,pp=2"), MustParseLayout("dp=2")}
	var got []string
	for _, l := range WithExperts(ls, 64) {
		require.NoError(t, l.Validate(), l.String())
		got = append(got, l.String())
	}
	assert.Equal(t, []string{"tp=1", "tp=8", "tp=8,ep=2", "tp=8,ep=4", "tp=8,ep=8", "dp=4,adp", "dp=4,ep=2,adp", "dp=4,ep=4,adp",
		"tp=2,pp=2", "tp=2,pp=2,ep=2", "dp=2"}, got)
	// An ep must divide the experts too: 6 experts take ep=2 only.
	got = got[:0]
	for _, l := range WithExperts([]Layout{MustParseLayout("tp=8")}, 6) {
		got = append(got, l.String())
	}
	assert.Equal(t, []string{"tp=8", "tp=8,ep=2"}, got)
}
