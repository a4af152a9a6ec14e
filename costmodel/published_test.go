package costmodel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/topology"
)

// Published measurements nobody here wrote, reproduced by the model.
//
// Source: NVIDIA TensorRT-LLM, docs/source/performance.md (the v0.5 / v0.6
// "Performance of TensorRT-LLM" page), section "Low Latency", table "H100
// GPUs (FP8)": first-token latency at batch size 1 (engines built with
// --enable_fp8 --fp8_kv_cache, so weights, KV and matmuls in FP8):
//
//	LLaMA 7B   TP 1  input 128:   7 ms    input 2048:  36 ms
//	LLaMA 70B  TP 4  input 128:  26 ms    input 2048: 109 ms
//
// LLaMA 7B and 70B there are Llama 2 (the llama-2-7b and llama-2-70b
// presets, in FP8 here). DefaultComputeEff (0.40) was fitted on the
// 7B/2048 row (an exact fit is 0.388), so that row checks little; the
// 70B/TP4/2048 row is out of sample and checks the TP split and the 160
// allreduces over NVLink as well.
//
// Measured error of the model: 7B/2048 -3.1% (34.9 ms), 70B/TP4/2048 +1.9%
// (111.1 ms); tolerance 5%. The 128-token rows are a known limit: the
// model has no per-kernel launch or framework overhead, so a short prompt
// (a few ms of roofline work) comes out 60-65% low (2.5 ms for 7 ms, 10.4
// ms for 26 ms); the test pins that gap so a change to it is seen.
func TestTensorRTLLMFirstTokenLatency(t *testing.T) {
	fp8 := func(name string) Model {
		m := Models[name]
		m.WeightBytes, m.KVBytes, m.Precision = 1, 1, "fp8"
		return m
	}
	hw := Hardwares["h100-nvlink-ib400"]
	for _, row := range []struct {
		model     string
		tp, input int
		published time.Duration
		lo, hi    float64 // accepted model/published ratio
	}{
		{"llama-2-7b", 1, 2048, 36 * time.Millisecond, 0.95, 1.05},
		{"llama-2-70b", 4, 2048, 109 * time.Millisecond, 0.95, 1.05},
		// The known gap, pinned within 0.03 of the ratio measured today.
		{"llama-2-7b", 1, 128, 7 * time.Millisecond, 0.32, 0.38},
		{"llama-2-70b", 4, 128, 26 * time.Millisecond, 0.37, 0.43},
	} {
		l := topology.Layout{TP: row.tp, PP: 1, CP: 1, DP: 1}
		p := Placement{Model: fp8(row.model), HW: hw, Ctx: l, Gen: l}
		got := p.Prefill([]Seq{{Tokens: row.input}})
		ratio := float64(got) / float64(row.published)
		t.Logf("%s tp=%d input %d: model %v, published %v: error %+.1f%%", row.model, row.tp, row.input, got, row.published, 100*(ratio-1))
		assert.True(t, ratio >= row.lo && ratio <= row.hi, "%s tp=%d input %d: model %v vs published %v (ratio %.3f outside [%.2f, %.2f])",
			row.model, row.tp, row.input, got, row.published, ratio, row.lo, row.hi)
	}
}
