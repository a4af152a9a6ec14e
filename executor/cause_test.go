package executor_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/transceiver"
)

// A request that failed or was cancelled is explained in the report by the
// rank that found the cause and what it found, wherever that rank is: the
// CTX group's first (world rank 0) and last rank, the GEN group's leader,
// a middle rank and its last; the GEN leader's own record would say only
// "failed on another rank of the group" or "ctx rank 0 cancelled". A
// transfer that outlives --transfer-timeout says so, with the timeout.
func TestNotCompletedNamesTheRankAndTheCause(t *testing.T) {
	for _, tc := range []struct {
		fault string
		state request.Status
		want  string
	}{
		{"fail-send@ctx:0,req=2", request.Failed, "ctx rank 0 (world rank 0) found: ctx rank 0 could not start the transfer (injected)"},
		{"fail-send@ctx:1,req=2", request.Failed, "ctx rank 1 (world rank 1) found: ctx rank 1 could not start the transfer (injected)"},
		{"cancel@ctx:0,req=2", request.Cancelled, "ctx rank 0 (world rank 0) found: cancelled on this rank (injected)"},
		{"cancel@gen:0,req=2", request.Cancelled, "gen rank 0 (world rank 2) found: cancelled on this rank (injected)"},
		{"cancel@gen:1,req=2", request.Cancelled, "gen rank 1 (world rank 3) found: cancelled on this rank (injected)"},
		{"cancel@gen:3,req=2", request.Cancelled, "gen rank 3 (world rank 5) found: cancelled on this rank (injected)"},
		{"timeout", request.Cancelled, ""},
	} {
		for _, backend := range []string{"local", "sim"} {
			t.Run(tc.fault+"/"+backend, func(t *testing.T) {
				cfg := baseConfig("tp=2", "tp=4", transceiver.Async)
				cfg.Workload.Requests = 4
				if tc.fault == "timeout" {
					cfg.TransferTimeout = time.Nanosecond
				} else {
					f, err := executor.ParseFault(tc.fault)
					require.NoError(t, err)
					cfg.Faults = []executor.Fault{f}
				}
				var rep *executor.Report
				var err error
				if backend == "sim" {
					// Links that take time: a transfer outlives 1ns.
					rep, _, err = executor.RunSim(t.Context(), cfg, sim.Config{Seed: 5, Checked: true, Fabric: sim.Fabrics["h100-nvlink-ib400"]})
				} else {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					rep, err = executor.RunLocal(ctx, cfg, true, 10*time.Second)
				}
				require.NoError(t, err)
				require.Zero(t, rep.LeakedBlocks)
				require.NotEmpty(t, rep.NotCompleted)
				for _, n := range rep.NotCompleted {
					require.Equal(t, tc.state, n.State, "%+v", n)
					require.False(t, n.Relayed, "a relayed reason left in the report: %+v", n)
					if tc.want == "" {
						require.Regexp(t, `^(ctx|gen) rank \d \(world rank \d\) found: the transfer timeout \(1ns\) passed$`, n.Reason)
						continue
					}
					require.Equal(t, fmt.Sprintf("request 2 %s: %s", tc.state, tc.want), fmt.Sprintf("request %d %s: %s", n.ID, n.State, n.Reason))
				}
				require.NotRegexp(t, regexp.MustCompile(`on another rank|a ctx rank cancelled`), fmt.Sprint(rep.NotCompleted))
			})
		}
	}
}
