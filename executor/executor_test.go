package executor_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var smallModel = topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}

func baseConfig(ctx, gen string, mode transceiver.Mode) executor.Config {
	return executor.Config{
		Ctx: topology.MustParseLayout(ctx), Gen: topology.MustParseLayout(gen), Model: smallModel, Mode: mode,
		Workload: executor.Workload{Requests: 24, InputTokens: 40, InputJitter: 0.5, OutputTokens: 3,
			Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: 4}, Seed: 1},
		CtxBlocks: 64, GenBlocks: 64, StallTimeout: 5 * time.Second,
	}
}

func run(t *testing.T, cfg executor.Config) *executor.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := runLocal(ctx, cfg, true, 10*time.Second)
	require.NoError(t, err)
	return rep
}

func TestRunCompletesAndLeaksNothing(t *testing.T) {
	for _, tc := range []struct {
		ctx, gen string
		mode     transceiver.Mode
	}{
		{"tp=1", "tp=4", transceiver.Async},
		{"tp=1", "tp=4", transceiver.Sync},
		{"tp=2", "tp=2", transceiver.Async},
		{"tp=2", "tp=2", transceiver.Sync},
		{"tp=2,pp=2", "tp=4", transceiver.Async},
		{"dp=2", "tp=2", transceiver.Async},
		{"dp=2,adp", "tp=2", transceiver.Async},
		{"tp=1", "dp=2,adp", transceiver.Sync},
		{"tp=1", "dp=2", transceiver.Async},
		// CP: short requests leave some ranks with no block at all.
		{"cp=4", "tp=1", transceiver.Async},
		{"tp=2", "cp=4", transceiver.Sync},
		{"tp=2,cp=2", "pp=2,cp=4", transceiver.Async},
	} {
		t.Run(tc.ctx+"->"+tc.gen+"/"+tc.mode.String(), func(t *testing.T) {
			rep := run(t, baseConfig(tc.ctx, tc.gen, tc.mode))
			require.Empty(t, rep.Errors)
			require.Equal(t, 24, rep.RequestsCompleted)
			require.Zero(t, rep.LeakedBlocks)
			require.Zero(t, rep.PinnedBlocksAtEnd)
			require.Positive(t, rep.BytesVerified)
			require.Equal(t, rep.BytesMoved, rep.BytesVerified, "every byte sent must be verified")
			require.Equal(t, 24, rep.TTFTMs.N)
		})
	}
}

// Under GEN attention-DP an executor group spans DP indices holding
// different requests. A rank must learn another index's transfer outcome
// from agreed data: deciding it locally desynchronised the idle decision
// (the leader in the intake broadcast, a member waiting for a tick).
func TestGenAttentionDPAgreesOnOtherIndicesTransfers(t *testing.T) {
	for _, mode := range []transceiver.Mode{transceiver.Async, transceiver.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := baseConfig("tp=1", "dp=2,adp", mode)
			cfg.Workload.Requests = 8
			cfg.Workload.OutputTokens = 16
			cfg.Workload.Arrival = executor.Arrival{Kind: executor.Rate, Rate: 200}
			cfg.DecodePerStep = time.Millisecond
			cfg.Records = true
			rep := run(t, cfg)
			require.Empty(t, rep.Errors)
			require.Equal(t, 8, rep.RequestsCompleted)
			require.Len(t, rep.Requests, 8)
			for _, q := range rep.Requests {
				require.Positive(t, q.TransferDone, "request %d (gen dp %d) has no agreed transfer", q.ID, q.GenDP)
				require.GreaterOrEqual(t, q.FirstToken, q.TransferDone, "request %d decoded before its KV arrived", q.ID)
			}
		})
	}
}

// A corrupted fragment fails its request on every rank, whatever the
// timing: the failing CTX rank's cancels to GEN peers it had not sent to
// carry the failure, so no rank votes "cancelled" (which would win over
// "failed" in the outcome consensus and make the result depend on timing).
func TestCorruptFragmentAlwaysFailsItsRequest(t *testing.T) {
	for _, pair := range [][2]string{{"tp=1", "tp=4"}, {"tp=2", "pp=2"}} {
		t.Run(pair[0]+"->"+pair[1], func(t *testing.T) {
			for range 5 {
				cfg := baseConfig(pair[0], pair[1], transceiver.Async)
				cfg.Workload.Requests = 8
				cfg.Faults = []executor.Fault{{Kind: executor.FaultCorrupt, Role: topology.Context, Rank: 0, Request: 2}}
				rep := run(t, cfg)
				require.Equal(t, 1, rep.RequestsFailed, "requests: %+v", rep.Requests)
				require.Equal(t, 7, rep.RequestsCompleted)
				require.Zero(t, rep.RequestsCancelled)
				require.Zero(t, rep.LeakedBlocks)
			}
		})
	}
}

// The report names what did not complete and why: the lowest request IDs
// first, at most three, over both GEN DP groups' leaders (each tallies its
// own requests), with the count of the rest; the faults sit on CTX's
// first and last ranks and on GEN's (one rank per DP group here).
func TestReportNamesWhatDidNotComplete(t *testing.T) {
	cfg := baseConfig("tp=2", "dp=2", transceiver.Async)
	cfg.Workload.Requests = 12
	cfg.Faults = []executor.Fault{
		{Kind: executor.FaultCorrupt, Role: topology.Context, Rank: 1, Request: 9},
		{Kind: executor.FaultFailTransfer, Role: topology.Generation, Rank: 1, Request: 4},
		{Kind: executor.FaultCancel, Role: topology.Generation, Rank: 0, Request: 7},
		{Kind: executor.FaultCorrupt, Role: topology.Context, Rank: 0, Request: 2},
	}
	cfg.Records = true
	rep := run(t, cfg)
	require.Equal(t, 4, rep.RequestsFailed+rep.RequestsCancelled, "requests: %+v", rep.Requests)
	byID := map[request.ID]executor.RequestRecord{}
	for _, q := range rep.Requests {
		byID[q.ID] = q
	}
	var got []request.ID
	for _, q := range rep.NotCompleted {
		got = append(got, q.ID)
		require.Equal(t, byID[q.ID].State, q.State, "request %d", q.ID)
		// Each was found by its GEN group's leader (dp=2: gen rank = DP
		// index, world rank 2 + it), whose record says what; the report
		// names the rank too.
		g := byID[q.ID].GenDP
		require.NotEmpty(t, byID[q.ID].Reason, "request %d", q.ID)
		require.Equal(t, fmt.Sprintf("gen rank %d (world rank %d) found: %s", g, 2+g, byID[q.ID].Reason), q.Reason, "request %d", q.ID)
	}
	require.Equal(t, []request.ID{2, 4, 7}, got, "the three lowest IDs of the four")
	require.NotEqual(t, byID[2].GenDP, byID[7].GenDP, "the test needs both GEN leaders' requests among the three")
	var b strings.Builder
	rep.WriteText(&b)
	text := b.String()
	require.Contains(t, text, "request 2 failed: "+rep.NotCompleted[0].Reason)
	require.Contains(t, text, "request 7 cancelled: "+rep.NotCompleted[2].Reason)
	require.Contains(t, text, "and 1 more failed or cancelled")
	require.NotContains(t, text, "request 9 failed")
	require.NotContains(t, text, "GEN leaders that reported")
	// With a GEN leader's report missing (under MPI, after an interrupt)
	// the rows are those of the leaders heard, and say so.
	rep.CountsPartial = "a lower bound: GEN leader world ranks [3] ... sent no report"
	b.Reset()
	rep.WriteText(&b)
	require.Contains(t, b.String(), "(of the GEN leaders that reported: the first of all may be missing)")
}

// Under a KV sample the byte counts are what was carried (1/KVSample of
// each head's elements): the text says so, with the bytes the run
// modelled and charged the links for. Without a sample it says nothing.
func TestReportTextSaysWhatASampleCarried(t *testing.T) {
	for _, tc := range []struct {
		sample int
		want   string
	}{
		{4, "KV bytes  64.00 MiB moved, 64.00 MiB verified (of completed requests); sampled 1/4: 256.00 MiB modelled, the links charged for all of it\n"},
		{1, "KV bytes  64.00 MiB moved, 64.00 MiB verified (of completed requests)\n"},
		{0, "KV bytes  64.00 MiB moved, 64.00 MiB verified (of completed requests)\n"},
	} {
		rep := &executor.Report{KVSample: tc.sample, BytesMoved: 64 << 20, BytesVerified: 64 << 20}
		var b strings.Builder
		rep.WriteText(&b)
		line := regexp.MustCompile(`(?m)^KV bytes\s+`).ReplaceAllString(b.String(), "KV bytes  ")
		require.Contains(t, line, tc.want, "kv sample %d", tc.sample)
	}
}
