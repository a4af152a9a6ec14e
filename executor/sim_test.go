package executor_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/transceiver"
)

func simJSON(t *testing.T, cfg executor.Config, sc sim.Config) ([]byte, uint64) {
	t.Helper()
	rep, res, err := executor.RunSim(t.Context(), cfg, sc)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Errors)
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	return b, res.Schedule
}

// One seed, one run: the whole report, per-rank reports and traces
// included, is byte-identical across runs of the same seed.
func TestRunSimIsDeterministic(t *testing.T) {
	for _, mode := range []transceiver.Mode{transceiver.Async, transceiver.Sync} {
		cfg := baseConfig("tp=2", "tp=2,dp=2,adp", mode)
		cfg.Trace = true
		sc := sim.Config{Seed: 5, Checked: true, Fabric: sim.Fabrics["h200-nvlink-ib400"]}
		a, sa := simJSON(t, cfg, sc)
		b, sb := simJSON(t, cfg, sc)
		require.Equal(t, string(a), string(b), "%s: two runs of one seed differ", mode)
		require.Equal(t, sa, sb, "%s: two runs of one seed took different schedules", mode)
		sc.Seed = 6
		_, other := simJSON(t, cfg, sc)
		require.NotEqual(t, sa, other, "%s: another seed took the same schedule", mode)
	}
}
