package sweepout

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/sweep"
)

// The best placement line says what decided a tie on goodput per GPU, and
// why a pair smaller than the budget is named for it.
func TestWhyBest(t *testing.T) {
	g := func(pair string, gpus int, perGPU, at, p99 float64) sweep.PairGoodput {
		return sweep.PairGoodput{Pair: pair, GPUs: gpus, PerGPU: perGPU, Rate: perGPU * float64(gpus), BestRPS: at, P99: p99}
	}
	for _, c := range []struct {
		name   string
		gs     []sweep.PairGoodput
		budget int
		want   string
	}{
		{"alone", []sweep.PairGoodput{g("a", 8, 0.5, 0.4, 100), g("b", 8, 0.25, 0.4, 100)}, 8, ""},
		{"smaller than the budget", []sweep.PairGoodput{g("a", 6, 0.5, 0.4, 100), g("b", 8, 0.25, 0.4, 100)}, 16,
			"; it uses 6 of the 16 GPUs: pairs rank by goodput per GPU, and no larger pair has more"},
		{"throughput decides", []sweep.PairGoodput{g("b", 8, 0.5, 0.39, 100), g("a", 8, 0.5, 0.4, 90), g("c", 8, 0.5, 0.3, 90)}, 8,
			"; tied on goodput per GPU with b, c, first on throughput per GPU at that rate (0.400 against b's 0.390 requests/s)"},
		{"TTFT p99 decides", []sweep.PairGoodput{g("a", 8, 0.5, 0.4, 120), g("b", 8, 0.5, 0.4, 90)}, 8,
			"; tied on goodput per GPU with a, first on TTFT p99 at that rate (90.0 against a's 120.0 ms)"},
		{"figures that round alike", []sweep.PairGoodput{g("a", 8, 0.5, 0.39512, 100), g("b", 8, 0.5, 0.3954, 90)}, 8,
			"; tied on goodput per GPU with a, first on throughput per GPU at that rate (0.3954 against a's 0.3951 requests/s)"},
		{"every figure", []sweep.PairGoodput{g("a", 8, 0.5, 0.4, 90), g("b", 8, 0.5, 0.4, 90)}, 8,
			"; tied on goodput per GPU with b, and with b on every figure: first in the sweep's order"},
	} {
		assert.Equal(t, c.want, whyBest(sweep.Ranked(c.gs), c.budget), c.name)
	}
}
