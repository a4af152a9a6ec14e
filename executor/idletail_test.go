package executor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/scenario"
)

// The end of the workload ends the idle wait, as any event does: a run
// whose idle tick is an hour ends when its last request does, and its
// duration holds no tail. Before, the router's rank slept out one tick
// after the last finish it heard (async), and a sync CTX group one more
// after the drain that reaped its last sends: a 1 s run under --timeout
// 2s failed, and under sim --idle-tick 5m reported a 300 s run. In
// simulation (exact: the run is shorter than one tick, by far) for the
// layouts whose ends differ, and in-process, under a deadline that an
// hour's tick would overrun.
func TestTheWorkloadEndsTheIdleWait(t *testing.T) {
	const tick = time.Hour
	for _, tc := range []struct{ ctx, gen, mode string }{
		{"tp=1", "tp=4", "async"},
		{"tp=2", "tp=2", "sync"},
		{"dp=2", "dp=2", "sync"},
		{"tp=2", "dp=2,adp", "sync"},
		{"tp=2", "dp=2,adp", "async"},
	} {
		for _, backend := range []string{"sim", "local"} {
			t.Run(fmt.Sprintf("%s/%s->%s/%s", backend, tc.ctx, tc.gen, tc.mode), func(t *testing.T) {
				s := scenario.New("the workload ends the idle wait")
				s.Ctx, s.Gen, s.Transfer = tc.ctx, tc.gen, tc.mode
				s.Requests, s.Input, s.Output = 3, 64, 2
				cfg, err := s.Config(false)
				require.NoError(t, err)
				cfg.IdleTick = tick
				var rep *executor.Report
				if backend == "sim" {
					sc, serr := s.SimConfig()
					require.NoError(t, serr)
					rep, _, err = runSim(t.Context(), cfg, sc)
				} else {
					ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
					defer cancel()
					rep, err = runLocal(ctx, cfg, true, 0)
				}
				require.NoError(t, err, "the run slept out its idle tick after its last request")
				require.Equal(t, 3, rep.RequestsCompleted)
				if backend == "sim" {
					require.Less(t, rep.DurationS, tick.Seconds()/1000, "the run's duration holds an idle tick after its last request")
				}
			})
		}
	}
}
