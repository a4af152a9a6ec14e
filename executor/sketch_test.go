package executor

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sketch's Dist is the exact one (DistOf) within SketchAccuracy, merged
// across "ranks" as if one, survives JSON, and stays small.
func TestSketchMatchesExactDistribution(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []int64
	parts := make([]Sketch, 4)
	for i := range 20000 {
		v := int64(rng.ExpFloat64() * 3e6) // ~3 ms, long tail
		if i%50 == 0 {
			v = 0 // zeros (a simulated run's handover) are kept exactly
		}
		all = append(all, v)
		parts[i%4].Add(v)
	}
	var merged Sketch
	for _, p := range parts {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		var back Sketch
		require.NoError(t, json.Unmarshal(b, &back))
		merged.Merge(back)
	}
	got, want := merged.Dist(), DistOf(all)
	assert.Equal(t, want.N, got.N)
	assert.InDelta(t, want.Mean, got.Mean, 1e-9*want.Mean)
	assert.Equal(t, want.Max, got.Max)
	for _, q := range [][2]float64{{want.P50, got.P50}, {want.P90, got.P90}, {want.P99, got.P99}} {
		assert.InEpsilon(t, q[0], q[1], 2*SketchAccuracy)
	}
	b, err := json.Marshal(merged)
	require.NoError(t, err)
	assert.Less(t, len(b), 8<<10, "a sketch of 20000 samples in %d bytes", len(b))
}

func TestSketchZeroValueAndConstant(t *testing.T) {
	var empty Sketch
	assert.Equal(t, Dist{}, empty.Dist())
	b, err := json.Marshal(empty)
	require.NoError(t, err)
	assert.Equal(t, "null", string(b))
	var k Sketch
	for range 10 {
		k.Add(1_000_000)
	}
	assert.Equal(t, Dist{N: 10, P50: 1, P90: 1, P99: 1, Mean: 1, Max: 1}, k.Dist(), "equal samples are reported exactly")
	require.Error(t, k.UnmarshalJSON([]byte(`"!!"`)))
}
