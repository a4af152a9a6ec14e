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
					rep, _, err = runSim(t.Context(), cfg, sim.Config{Seed: 5, Checked: true, Fabric: sim.Fabrics["h100-nvlink-ib400"]})
				} else {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					rep, err = runLocal(ctx, cfg, true, 10*time.Second)
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

// The CTX and GEN groups agree on a transfer apart, so a rank's own cause
// may be for an outcome the request did not have: the report takes the
// cause that ended the request as it ended. A CTX rank whose bytes all
// left and whose ack came past the transfer timeout found no cause (the
// GEN ranks hold the bytes and completed the request): it neither explains
// the request nor takes the place of a real cause. In simulation, where
// the timeout and the late ack are exact.
func TestNotCompletedPrefersTheCauseOfItsOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gen    string
		faults []string
		want   []string
	}{
		{"a failed receive beside a late ack", "tp=2", []string{"fail-transfer@gen:1,req=2", "delay-ack@gen:0,req=2,for=3s"},
			[]string{"request 2 failed: gen rank 1 (world rank 2) found: injected rank-local receive failure"}},
		{"a cancel and a failure on two GEN ranks: the group agreed cancelled", "tp=4", []string{"fail-transfer@gen:1,req=2", "cancel@gen:2,req=2"},
			[]string{"request 2 cancelled: gen rank 2 (world rank 3) found: cancelled on this rank (injected)"}},
		{"late acks of completed requests before a cancel", "tp=2",
			[]string{"delay-ack@gen:0,req=1,for=3s", "delay-ack@gen:0,req=2,for=3s", "delay-ack@gen:0,req=3,for=3s", "cancel@ctx:0,req=5"},
			[]string{"request 5 cancelled: ctx rank 0 (world rank 0) found: cancelled on this rank (injected)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig("tp=1", tc.gen, transceiver.Async)
			cfg.Workload.Requests = 6
			cfg.TransferTimeout = 500 * time.Millisecond
			for _, s := range tc.faults {
				f, err := executor.ParseFault(s)
				require.NoError(t, err)
				cfg.Faults = append(cfg.Faults, f)
			}
			rep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: 5, Checked: true})
			require.NoError(t, err)
			var got []string
			for _, n := range rep.NotCompleted {
				got = append(got, fmt.Sprintf("request %d %s: %s", n.ID, n.State, n.Reason))
			}
			require.Equal(t, tc.want, got)
		})
	}
}
