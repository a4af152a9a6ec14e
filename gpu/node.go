package gpu

import (
	"fmt"

	"github.com/rankrun/rankrun/internal/units"
	"github.com/rankrun/rankrun/topology"
)

// RankPlan is one local rank's pool on a node: the rank of the layout
// whose shard sizes its blocks (local rank mod the layout's ranks), the
// block size, and its PoolPlan.
type RankPlan struct {
	LocalRank, InstanceRank int
	BlockBytes              int
	PoolPlan
}

// NodePlan is the pools of a node's local ranks: each rank's, their total,
// and what the node as a whole should be warned of (pools that together
// pass the host's memory, GPUs shared by several ranks).
type NodePlan struct {
	Ranks          []RankPlan
	TotalPoolBytes int64
	Warnings       []string
}

// PlanError is a local rank whose pool cannot be planned: its layout
// rank's shard (Shard) or its pool (PlanPool's error).
type PlanError struct {
	LocalRank, InstanceRank int
	Shard                   bool // the layout cannot shard the model for InstanceRank
	Err                     error
}

func (e *PlanError) Error() string {
	if e.Shard {
		return fmt.Sprintf("rank %d: %v", e.InstanceRank, e.Err)
	}
	return fmt.Sprintf("local rank %d: %v", e.LocalRank, e.Err)
}

func (e *PlanError) Unwrap() error { return e.Err }

// PlanNode plans the pools of ranks local ranks running layout on model m
// (PlanPool for each, with fraction of its bound GPU's free memory or
// hostBytes without one). rankrun keeps KV bytes in host memory even when a
// GPU sizes a pool, so the node's total must fit the host: the plan warns
// when it does not, and when several ranks share a GPU (each planned from
// its free memory independently).
func PlanNode(d Discovery, layout topology.Layout, m topology.Model, ranks int, fraction float64, hostBytes int64) (NodePlan, error) {
	plan := NodePlan{Ranks: []RankPlan{}, Warnings: []string{}}
	for lr := range ranks {
		ir := lr % layout.Ranks()
		shard, err := layout.Shard(m, ir)
		if err != nil {
			return plan, &PlanError{LocalRank: lr, InstanceRank: ir, Shard: true, Err: err}
		}
		p, err := PlanPool(d, lr, fraction, hostBytes, shard.BlockBytes())
		if err != nil {
			return plan, &PlanError{LocalRank: lr, InstanceRank: ir, Err: err}
		}
		plan.Ranks = append(plan.Ranks, RankPlan{LocalRank: lr, InstanceRank: ir, BlockBytes: shard.BlockBytes(), PoolPlan: p})
		plan.TotalPoolBytes += p.Bytes
	}
	if d.HostMemAvailable > 0 && plan.TotalPoolBytes > d.HostMemAvailable {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("the %d pools need %s in all but the host has %s available (rankrun keeps KV bytes in host memory)",
			ranks, units.Bytes(plan.TotalPoolBytes), units.Bytes(d.HostMemAvailable)))
	}
	if d.Available && ranks > len(d.Devices) {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("%d local ranks share %d GPUs: each GPU's pools are planned from its free memory independently, so together they take more than --fraction %v of it",
			ranks, len(d.Devices), fraction))
	}
	return plan, nil
}
