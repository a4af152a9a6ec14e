package sweep

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
)

// The compute hook asks the Placement with every field of the batch: a
// chunk's earlier tokens and whether it ends its prompt change its time.
func TestCostModelPassesTheBatch(t *testing.T) {
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	p := costmodel.Placement{Model: costmodel.Models["llama-3-8b"], HW: hardware(t, "h100"), Ctx: l, Gen: l}
	c := CostModel{Placement: p}
	chunk := c.Prefill([]executor.Seq{{Tokens: 4096, Past: 8192, Partial: true}})
	assert.Equal(t, p.Prefill([]costmodel.Seq{{Tokens: 4096, Past: 8192, Partial: true}}), chunk)
	assert.Greater(t, chunk, c.Prefill([]executor.Seq{{Tokens: 4096, Partial: true}}), "attention over the earlier chunks costs")
	assert.Equal(t, p.Decode([]costmodel.Seq{{Tokens: 100, DP: 0}, {Tokens: 300}}), c.Decode([]executor.Seq{{Tokens: 100}, {Tokens: 300}}))
}
