package sweep

import (
	"time"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
)

// CostModel is the executor's compute hook (executor.Compute) over a cost
// model placement: each prefill and decode step takes the time the
// Placement gives its batch, in virtual time under the sim backend. Set
// the Placement's Ctx and Gen to the run's layouts.
//
//	cfg.Compute = sweep.CostModel{Placement: costmodel.Placement{Model: m, HW: hw, Ctx: cfg.Ctx, Gen: cfg.Gen}}
type CostModel struct {
	costmodel.Placement
}

// Prefill is the Placement's prefill of batch.
func (c CostModel) Prefill(batch []executor.Seq) time.Duration {
	return c.Placement.Prefill(seqs(batch))
}

// Decode is the Placement's decode step of batch.
func (c CostModel) Decode(batch []executor.Seq) time.Duration { return c.Placement.Decode(seqs(batch)) }

func seqs(batch []executor.Seq) []costmodel.Seq {
	out := make([]costmodel.Seq, len(batch))
	for i, q := range batch {
		out[i] = costmodel.Seq{Tokens: q.Tokens, DP: q.DP, Past: q.Past, Partial: q.Partial}
	}
	return out
}
