package costmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// TP splits the query heads: Llama-3-8B's 32 heads go over tp = 8, 16 or
// 32, not over 24, though its 8 KV heads would duplicate over 24 (the
// geometry's check lets it through). Refused on either side, and by the
// serving models; under attention-DP a rank holds every head.
func TestAttentionHeadsSplitOverTP(t *testing.T) {
	m, hw := Models["llama-3-8b"], Hardwares["h100-nvlink-ib400"]
	require.Equal(t, 32, m.Heads)
	one := topology.MustParseLayout("tp=1")
	for _, spec := range []string{"tp=24", "tp=48", "tp=64"} {
		l := topology.MustParseLayout(spec)
		msg := `model "llama-3-8b"'s 32 attention heads do not split evenly over it (heads % tp must be 0)`
		for _, side := range []string{"ctx", "gen"} {
			p := Placement{Model: m, HW: hw, Ctx: l, Gen: one}
			if side == "gen" {
				p.Ctx, p.Gen = one, l
			}
			err := p.Validate()
			require.Error(t, err, "%s %s", side, spec)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), side+" layout "+spec+": ")
			assert.Contains(t, err.Error(), msg)
		}
		p := Placement{Model: m, HW: hw}
		_, err := p.Offline(l, Scheduler{}, 128, 128)
		assert.ErrorContains(t, err, msg, spec)
		_, err = p.Benchmark(l, Benchmark{Requests: 4, In: 128, Out: 128})
		assert.ErrorContains(t, err, msg, spec)
	}
	for _, spec := range []string{"tp=1", "tp=8", "tp=16", "tp=32"} {
		l := topology.MustParseLayout(spec)
		assert.NoError(t, Placement{Model: m, HW: hw, Ctx: l, Gen: l}.Validate(), spec)
	}
	// Attention-DP: attention is whole on each rank; the FFN splits.
	r1 := Models["deepseek-r1"]
	adp := topology.MustParseLayout("tp=3,dp=2,adp")
	require.NotZero(t, r1.Heads%3)
	assert.NoError(t, Placement{Model: r1, HW: Hardwares["h200-nvlink-ib400"]}.CheckHeads(adp))
	// A Placement of the model alone (no layouts, as sweep builds one)
	// validates: there is no TP to split over.
	assert.NoError(t, Placement{Model: m, HW: hw}.Validate())
}
