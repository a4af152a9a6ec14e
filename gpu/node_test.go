package gpu

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// A node's plan holds every local rank, each sized by its layout rank's
// shard (local rank mod the layout's ranks) and bound to GPU local rank
// mod the devices; the total is theirs; the node is warned when the pools
// pass the host's memory and when ranks share a GPU.
func TestPlanNode(t *testing.T) {
	m := topology.Model{Layers: 2, KVHeads: 4, HeadDim: 8, TokensPerBlock: 4, ElemBytes: 2}
	tp2, err := topology.ParseLayout("tp=2")
	require.NoError(t, err)
	d := Discovery{Available: true, HostMemAvailable: 3 << 20, Devices: []DeviceInfo{{Index: 0, MemFree: 1 << 20}, {Index: 1, MemFree: 2 << 20}}}
	plan, err := PlanNode(d, tp2, m, 3, 1, 1<<20)
	require.NoError(t, err)
	require.Len(t, plan.Ranks, 3)
	shard, err := tp2.Shard(m, 1)
	require.NoError(t, err)
	var total int64
	for i, r := range plan.Ranks {
		assert.Equal(t, i, r.LocalRank)
		assert.Equal(t, i%2, r.InstanceRank)
		assert.Equal(t, i%2, r.Device.Index, "local rank %d binds GPU %d", i, i%2)
		assert.Equal(t, shard.BlockBytes(), r.BlockBytes)
		total += r.Bytes
	}
	assert.Equal(t, total, plan.TotalPoolBytes)
	require.Len(t, plan.Warnings, 2, "%v", plan.Warnings)
	assert.Contains(t, plan.Warnings[0], "the 3 pools need")
	assert.Contains(t, plan.Warnings[1], "3 local ranks share 2 GPUs")

	// A rank whose pool cannot be planned is named, with PlanPool's error.
	host := Discovery{HostMemAvailable: 1 << 20}
	_, err = PlanNode(host, tp2, m, 2, 1, 2<<20)
	var pe *PlanError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 0, pe.LocalRank)
	assert.False(t, pe.Shard)
	assert.True(t, errors.Is(err, ErrInvalid))
	// A layout that cannot shard the model: the layout rank is named.
	pp4, err := topology.ParseLayout("pp=4") // more stages than the model's 2 layers
	require.NoError(t, err)
	_, err = PlanNode(host, pp4, m, 1, 1, 1<<10)
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.Shard)
}
