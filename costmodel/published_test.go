package costmodel

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Published measurements nobody here wrote, reproduced by the model
// (Published: each row's source, configuration and band). A fitted row
// checks little beyond its fit; a held-out row must be within +-25%; a
// known gap is pinned to today's ratio, so a change to it is seen.
//
// DefaultComputeEff was fitted on TensorRT-LLM's 7B/2048 first token (with
// the step's host cost taken out); the 70B/TP4/2048 row is out of sample and checks the
// TP split and its 160 allreduces as well. H100StepOverhead was fitted on
// NeMo's Llama-2-7B TP 1 latency; its TP 2, 4 and 8 rows check the split,
// the allreduces' algorithms (TP 8 was slower than TP 4 with ring latency
// on every small allreduce) and the overhead together.
func TestPublishedRows(t *testing.T) {
	names := map[string]bool{}
	for _, r := range Published {
		pred, ratio, ok := r.Check()
		t.Log(r.String())
		assert.True(t, ok, "%s: model %.1f %s vs published %.1f (ratio %.3f outside [%.2f, %.2f]): %s", r.Name, pred, r.Unit, r.Value, ratio, r.Lo, r.Hi, r.Config)
		assert.False(t, math.IsNaN(pred) || math.IsInf(pred, 0), r.Name)
		assert.False(t, names[r.Name], "duplicate row %s", r.Name)
		names[r.Name] = true
		assert.NotEmpty(t, r.Source, r.Name)
		switch {
		case r.Gap != "":
			// A known gap is pinned: a change to it is seen.
			assert.LessOrEqual(t, r.Hi-r.Lo, 0.1, "%s: a known gap's band [%.2f, %.2f] pins nothing", r.Name, r.Lo, r.Hi)
		case r.Fitted != "" && r.Joint:
			// A row of a fit over a whole column: within the tolerance.
			assert.True(t, r.Lo >= 1-Tolerance-1e-9 && r.Hi <= 1+Tolerance+1e-9, "%s: band [%.2f, %.2f] wider than +-25%%", r.Name, r.Lo, r.Hi)
		case r.Fitted != "":
			// A row a constant was fitted on is met closely.
			assert.True(t, r.Lo >= 0.95-1e-9 && r.Hi <= 1.05+1e-9, "%s: a fitted row's band [%.2f, %.2f] is wider than +-5%%", r.Name, r.Lo, r.Hi)
		default:
			// Held-out rows meet the stated tolerance.
			assert.True(t, r.Lo >= 1-Tolerance-1e-9 && r.Hi <= 1+Tolerance+1e-9, "%s: band [%.2f, %.2f] wider than +-25%% without a known gap", r.Name, r.Lo, r.Hi)
		}
	}
	// The direction as well as the size: NeMo's latency falls with every
	// doubling of TP up to 8; with every small allreduce charged a ring's
	// 2(p-1) hops the model had TP 8 slower than TP 4.
	prev := math.Inf(1)
	for _, name := range []string{"nemo-llama2-7b-tp1", "nemo-llama2-7b-tp2", "nemo-llama2-7b-tp4", "nemo-llama2-7b-tp8"} {
		for _, r := range Published {
			if r.Name == name {
				pred := r.Predict()
				assert.Less(t, pred, prev, "%s: %.1f ms, not faster than the layout with half the TP", name, pred)
				prev = pred
			}
		}
	}
	// The 405B rows' direction: PP 8 ahead at max throughput, TP 8 at
	// batch 1 (the model had TP ahead at both before its steady state
	// pipelined PP micro-batches).
	for _, r := range Published {
		if r.Unit == "x" {
			assert.Greater(t, r.Predict(), 1.0, "%s: the published direction is %.1fx", r.Name, r.Value)
		}
	}
	// The rows (TensorRT-LLM's Llama-3.3-70B FP8 throughput) are
	// held out: no constant was fitted on them.
	for _, name := range []string{"tput-70b-h100-tp2-1000/1000", "tput-70b-h200-tp1-128/2048", "tput-70b-h200-tp1-2048/128", "tput-70b-h100-tp2-2048/128"} {
		found := false
		for _, r := range Published {
			if r.Name == name {
				found = true
				assert.Equal(t, "held out", r.Kind(), name)
			}
		}
		assert.True(t, found, name)
	}
	held := 0
	for _, r := range Published {
		if r.Kind() == "held out" {
			held++
		}
	}
	assert.GreaterOrEqual(t, held, 4, "held-out rows check the model; fitted ones only its fit")
	// GB200's FP4 and KV efficiencies are fitted on the 70B column only:
	// the 405B column beside it is held out (but for its known gaps).
	gbHeld := 0
	for _, r := range Published {
		if strings.HasPrefix(r.Name, "tput-405b-gb200-") {
			assert.Empty(t, r.Fitted, r.Name)
			if r.Kind() == "held out" {
				gbHeld++
			}
		}
	}
	assert.Equal(t, 7, gbHeld, "the 405B GB200 column: 7 of 10 held out and within the tolerance")
}

// HeldOutError is the RMS of the log error over the rows no constant was
// fitted on, known gaps included and fitted rows left out.
func TestHeldOutError(t *testing.T) {
	row := func(fitted, gap string, pred float64) Row {
		return Row{Value: 100, Fitted: fitted, Gap: gap, Model: func() float64 { return pred }}
	}
	rms, n := HeldOutError([]Row{row("", "", 200), row("c", "", 400), row("", "why", 50), row("", "", 100)})
	assert.Equal(t, 3, n)
	assert.InDelta(t, math.Sqrt(2*math.Ln2*math.Ln2/3), rms, 1e-12)
	rms, n = HeldOutError(nil)
	assert.Equal(t, 0, n)
	assert.Zero(t, rms)
}
