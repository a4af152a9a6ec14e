package executor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/scenario"
)

// A sync GEN rank that finished its own blocking receive waits in the
// next collective for a peer still inside its receive, which the transfer
// deadline bounds (3 s here), longer than the collective bound (1 s). The
// wait is given the time left to that deadline: the request whose CTX
// rank never sends is cancelled at its deadline and the others complete,
// where the old bound ended the run in ErrCollectiveTimeout at 1 s,
// naming a rank that was only waiting out its own deadline. The silent
// CTX rank, and so the blocked GEN rank, is each rank position of a
// group of four: first, middle, last.
func TestSyncReceiveOutlastingTheCollectiveBound(t *testing.T) {
	for _, backend := range []string{"sim", "local"} {
		for _, pos := range []int{0, 2, 3} {
			t.Run(fmt.Sprintf("%s/ctx:%d", backend, pos), func(t *testing.T) {
				s := scenario.New("sync receive outlasting the collective bound")
				s.Ctx, s.Gen, s.Transfer = "tp=4", "tp=4", "sync"
				s.Requests, s.Input, s.Output = 6, 64, 4
				s.TransferTimeout, s.CollectiveTimeout = 3*time.Second, time.Second
				if backend == "local" { // wall time: short, with room for a loaded host
					t.Parallel()
					s.TransferTimeout, s.CollectiveTimeout = 1500*time.Millisecond, 500*time.Millisecond
				}
				s.Faults = []string{fmt.Sprintf("timeout-transfer@ctx:%d,req=1", pos)}
				cfg, err := s.Config(false)
				require.NoError(t, err)
				var rep *executor.Report
				if backend == "sim" {
					sc, serr := s.SimConfig()
					require.NoError(t, serr)
					rep, _, err = runSim(t.Context(), cfg, sc)
				} else {
					rep, err = runLocal(t.Context(), cfg, true, s.CollectiveTimeout)
				}
				require.NoError(t, err, "a peer inside its sync receive, within its deadline, timed out the group")
				require.True(t, rep.OK(), "%v", rep.Errors)
				require.Equal(t, [3]int{5, 0, 1}, [3]int{rep.RequestsCompleted, rep.RequestsFailed, rep.RequestsCancelled})
				require.Len(t, rep.NotCompleted, 1)
				require.Equal(t, request.ID(1), rep.NotCompleted[0].ID, "the silent request is cancelled at its deadline")
				if backend == "sim" {
					require.GreaterOrEqual(t, rep.DurationS, s.TransferTimeout.Seconds(), "the cancel comes at the transfer deadline (virtual time)")
				}
			})
		}
	}
}
