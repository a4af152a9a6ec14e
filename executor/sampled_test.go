package executor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// A sampled KV cache (one 2-byte element a head, what --kv-sample leaves
// by default in simulation) is checked at every coordinate a GEN rank
// receives: a byte flipped on the way at the first or last block, layer,
// K or V, head or token of a fragment fails its request, and the reason
// names exactly where. On the sim backend the bytes land in the blocks and
// are checked there; in-process they are copied and checked in one pass,
// from the sender's runs back to back (tp=2 -> tp=2) or apart (tp=2 ->
// tp=4, each fragment half the sender's heads). The fault sits on the CTX
// group's first and last rank. Each coordinate is one of the sampled
// check's mutants (make mutate: sampled-check-skips-*).
func TestSampledKVCheckCatchesEveryCoordinate(t *testing.T) {
	sampled := topology.Model{Layers: 4, KVHeads: 8, HeadDim: 1, TokensPerBlock: 8, ElemBytes: 2}
	// input 40 tokens: blocks 0..4. ctx tp=2: rank 0 holds heads [0,4),
	// rank 1 [4,8); the last head of a fragment is the last of its range.
	for _, pos := range []struct{ at, block, layer, kv, head, token string }{
		{"last", "4", "3", "V", "last", "7"},
		{"first", "0", "0", "K", "first", "0"},
		{"last/first/k/first/first", "4", "0", "K", "first", "0"},
		{"first/last/k/first/first", "0", "3", "K", "first", "0"},
		{"first/first/v/first/first", "0", "0", "V", "first", "0"},
		{"first/first/k/last/first", "0", "0", "K", "last", "0"},
		{"first/first/k/first/last", "0", "0", "K", "first", "7"},
	} {
		for _, gen := range []string{"tp=2", "tp=4"} {
			for _, rank := range []int{0, 1} {
				for _, backend := range []string{"sim", "local"} {
					name := fmt.Sprintf("%s/gen=%s/ctx-rank=%d/%s", pos.at, gen, rank, backend)
					t.Run(name, func(t *testing.T) {
						cfg := baseConfig("tp=2", gen, transceiver.Async)
						cfg.Model = sampled
						cfg.Workload.Requests, cfg.Workload.InputTokens, cfg.Workload.InputJitter = 4, 40, 0
						cfg.Records = true
						at, err := transceiver.ParseCorruptAt(pos.at)
						require.NoError(t, err)
						cfg.Faults = []executor.Fault{{Kind: executor.FaultCorrupt, Role: topology.Context, Rank: rank, Request: 2, CorruptAt: at}}
						var rep *executor.Report
						if backend == "sim" {
							rep, _, err = runSim(t.Context(), cfg, sim.Config{Seed: 3, Checked: true})
						} else {
							ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
							defer cancel()
							rep, err = runLocal(ctx, cfg, true, 10*time.Second)
						}
						require.NoError(t, err)
						require.Equal(t, 1, rep.RequestsFailed, "requests: %+v", rep.Requests)
						require.Equal(t, 3, rep.RequestsCompleted)
						require.Zero(t, rep.LeakedBlocks)
						if rank != 0 {
							return // the GEN ranks that caught it are not the leader, whose record says "on another rank"
						}
						// GEN's leader (rank 0) caught it: heads [0,4) of tp=2, or
						// the fragment of heads [0,2) of tp=4.
						head := map[string]map[string]int{"tp=2": {"first": 0, "last": 3}, "tp=4": {"first": 0, "last": 1}}[gen][pos.head]
						want := fmt.Sprintf(`request 2 block %s from ctx rank 0: layer %s %s head %d token %s of the block`,
							pos.block, pos.layer, pos.kv, head, pos.token)
						found := false
						for _, q := range rep.Requests {
							if q.ID != 2 {
								continue
							}
							found = true
							if backend == "local" && gen == "tp=4" && q.Reason == "peer world rank 0 reported the transfer failed" {
								// In-process, tp=4's other GEN rank fed by
								// ctx rank 0 gets its own corrupted
								// fragment and may fail first: ctx rank 0
								// relays it and the leader withdraws its
								// receive unchecked. The sim backend (and
								// tp=2, one GEN rank per sender) is exact.
								continue
							}
							require.Contains(t, q.Reason, want)
						}
						require.True(t, found, "no record of request 2")
					})
				}
			}
		}
	}
}
