package executor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/launch"
	"github.com/rankrun/rankrun/topology"
)

// A whole disaggregated job in one process: CTX tp=1 sends every request's
// KV to GEN tp=4, where every byte is verified; checked collectives.
func ExampleRun() {
	cfg := executor.Config{
		Ctx:   topology.MustParseLayout("tp=1"),
		Gen:   topology.MustParseLayout("tp=4"),
		Model: topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2},
		Workload: executor.Workload{Requests: 8, InputTokens: 64, OutputTokens: 4,
			Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: 2}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := executor.Run(ctx, cfg, launch.Local{Checked: true, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("completed:", rep.RequestsCompleted, "leaked blocks:", rep.LeakedBlocks)
	fmt.Println("every byte verified:", rep.BytesVerified == rep.BytesMoved && rep.BytesMoved > 0)
	// Output:
	// completed: 8 leaked blocks: 0
	// every byte verified: true
}
