package costmodel

import (
	"fmt"
	"math"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/topology"
)

// Row is one published measurement this project did not write, with the
// model's prediction of it (DESIGN.md §13: fidelity). Rows a constant of
// the model was fitted on are marked apart from held-out rows; a known gap
// (a row the model is known to miss, and why) keeps a band around today's
// ratio, so that a change to it is seen.
type Row struct {
	Name   string  // short identifier: "nemo-llama2-7b-tp8"
	Source string  // where the figure is published
	Config string  // what was measured
	Unit   string  // "ms" or "GB/s"
	Value  float64 // the published figure
	// Lo and Hi bound the accepted ratio of prediction to published.
	Lo, Hi float64
	// Fitted names the constant fitted on this row ("" for a held-out
	// row).
	Fitted string
	// Joint marks a row of a fit over several rows at once (one column of
	// a table): the fit meets each within Tolerance, not closely.
	Joint bool
	// Gap, when set, says why the row is outside +-25% (Lo and Hi then
	// pin today's ratio).
	Gap string
	// Model computes the model's figure for the row, in Unit.
	Model func() float64
}

// Predict is the model's figure for the row, in its Unit.
func (r Row) Predict() float64 { return r.Model() }

// Check reports whether the prediction is within the row's band, and the
// prediction and its ratio to the published figure.
func (r Row) Check() (pred, ratio float64, ok bool) {
	pred = r.Model()
	ratio = pred / r.Value
	return pred, ratio, ratio >= r.Lo && ratio <= r.Hi
}

// Kind is "fitted", "held out" or "known gap".
func (r Row) Kind() string {
	switch {
	case r.Gap != "":
		return "known gap"
	case r.Fitted != "":
		return "fitted"
	}
	return "held out"
}

// Tolerance is the band held-out and fitted rows must meet: +-25%.
const Tolerance = 0.25

// Published is every published figure the model is checked against.
var Published = publishedRows()

func publishedRows() []Row {
	h100, gb200 := Hardwares["h100-nvlink-ib400"], Hardwares["gb200-nvl72"]
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	busBW := func(hw Hardware, members []int, bytes int) float64 {
		t := hw.Fabric.Collective(flight.KindAllreduce, members, bytes).Seconds()
		p := float64(len(members))
		return 2 * (p - 1) / p * float64(bytes) / t / 1e9
	}
	ranks := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	tp := func(n int) topology.Layout { return topology.Layout{TP: n, PP: 1, CP: 1, DP: 1} }
	// A batch-1 request end to end: its prefill and out decode steps.
	latency := func(m Model, hw Hardware, l topology.Layout, in, out int) func() float64 {
		return func() float64 {
			p := Placement{Model: m, HW: hw, Ctx: l, Gen: l}
			d := p.Prefill([]Seq{{Tokens: in}})
			for i := range out {
				d += p.Decode([]Seq{{Tokens: in + i + 1}})
			}
			return ms(d)
		}
	}
	ttft := func(m Model, hw Hardware, l topology.Layout, in int) func() float64 {
		return func() float64 { return ms(Placement{Model: m, HW: hw, Ctx: l, Gen: l}.Prefill([]Seq{{Tokens: in}})) }
	}
	const nemo = "NVIDIA NeMo Framework documentation, \"Llama performance\" (inference latency, batch 1)"
	const coreweave = "coreweave/nccl-tests README, \"Expected Performance\""
	const trt = "NVIDIA TensorRT-LLM docs/source/performance.md (v0.5/v0.6), \"Low Latency\", H100 FP8, batch 1"
	lo, hi := 1-Tolerance, 1+Tolerance
	rows := []Row{
		{Name: "nccl-allreduce-2x8-h100-ib", Source: "NVIDIA/nccl-tests#290 (46-48 GB/s per NDR NIC, 8 NICs a node) and #212 (ring 370 GB/s in a node)",
			Config: "all_reduce_perf 8 GB, 2 nodes x 8 H100 SXM, 8x 400G NDR per node, NCCL_ALGO=Ring: bus bandwidth", Unit: "GB/s", Value: 377,
			Lo: 0.95, Hi: 1.05, Fitted: "the h100 fabric's Inter bandwidth (48 GB/s), Rails (8) and Ring (370 GB/s)",
			Model: func() float64 { return busBW(h100, ranks(16), 8<<30) }},
		{Name: "nccl-allreduce-8-h100-nvls", Source: "NVIDIA/nccl-tests#290 (476 GB/s, \"in the expected range for H100\")",
			Config: "all_reduce_perf 8 GB, 8 H100 SXM in one node, NVLink SHARP: bus bandwidth", Unit: "GB/s", Value: 476,
			Lo: 0.95, Hi: 1.05, Fitted: "the h100 fabric's NVLS (476 GB/s)",
			Model: func() float64 { return busBW(h100, ranks(8), 8<<30) }},
		{Name: "nccl-allreduce-72-gb200-nvls", Source: coreweave + ", GB200 single rack",
			Config: "all_reduce_perf 8 GB, one GB200 NVL72 rack (72 GPUs, NCCL 2.26.2): bus bandwidth", Unit: "GB/s", Value: 834.6,
			Lo: 0.95, Hi: 1.05, Fitted: "the gb200 fabric's NVLS (835 GB/s)",
			Model: func() float64 { return busBW(gb200, ranks(72), 8<<30) }},
		{Name: "nccl-allreduce-2x72-gb200", Source: coreweave + ", GB200 2 racks",
			Config: "all_reduce_perf 16 GB, two GB200 NVL72 racks (144 GPUs, NCCL 2.26.2): bus bandwidth", Unit: "GB/s", Value: 810.4,
			Lo: lo, Hi: hi, Model: func() float64 { return busBW(gb200, ranks(144), 16<<30) }},
		{Name: "nccl-allreduce-20x72-gb200", Source: coreweave + ", GB200 20 racks",
			Config: "all_reduce_perf 16 GB, twenty GB200 NVL72 racks (1,440 GPUs, NCCL 2.26.2): bus bandwidth", Unit: "GB/s", Value: 405.7,
			Lo: 0.95, Hi: 1.05, Fitted: "the gb200 fabric's Channels (8 NICs a rack between racks)",
			Model: func() float64 { return busBW(gb200, ranks(1440), 16<<30) }},
		{Name: "nemo-llama2-7b-tp1", Source: nemo, Config: "Llama-2-7B, 1 H100, 128 in / 20 out", Unit: "ms", Value: 153.8,
			Lo: 0.99, Hi: 1.01, Fitted: fmt.Sprintf("H100StepOverhead (%v a step)", H100StepOverhead), Model: latency(Models["llama-2-7b"], h100, tp(1), 128, 20)},
		{Name: "nemo-llama2-7b-tp2", Source: nemo, Config: "Llama-2-7B, TP 2 on H100, 128 in / 20 out", Unit: "ms", Value: 128.6,
			Lo: lo, Hi: hi, Model: latency(Models["llama-2-7b"], h100, tp(2), 128, 20)},
		{Name: "nemo-llama2-7b-tp4", Source: nemo, Config: "Llama-2-7B, TP 4 on H100, 128 in / 20 out", Unit: "ms", Value: 107.4,
			Lo: lo, Hi: hi, Model: latency(Models["llama-2-7b"], h100, tp(4), 128, 20)},
		{Name: "nemo-llama2-7b-tp8", Source: nemo, Config: "Llama-2-7B, TP 8 on H100, 128 in / 20 out", Unit: "ms", Value: 97.6,
			Lo: lo, Hi: hi, Model: latency(Models["llama-2-7b"], h100, tp(8), 128, 20)},
		{Name: "trtllm-llama2-7b-ttft-2048", Source: trt, Config: "LLaMA 7B (Llama 2) FP8, TP 1, first token of 2048 tokens", Unit: "ms", Value: 36,
			Lo: 0.95, Hi: 1.05, Fitted: fmt.Sprintf("DefaultComputeEff (%.3f)", DefaultComputeEff), Model: ttft(fp8(Models["llama-2-7b"]), h100, tp(1), 2048)},
		{Name: "trtllm-llama2-70b-ttft-2048", Source: trt, Config: "LLaMA 70B (Llama 2) FP8, TP 4, first token of 2048 tokens", Unit: "ms", Value: 109,
			Lo: 0.95, Hi: 1.05, Model: ttft(fp8(Models["llama-2-70b"]), h100, tp(4), 2048)},
		{Name: "trtllm-llama2-7b-ttft-128", Source: trt, Config: "LLaMA 7B (Llama 2) FP8, TP 1, first token of 128 tokens", Unit: "ms", Value: 7,
			Lo: 0.66, Hi: 0.72, Gap: "a short prompt is a few ms of roofline work plus one step's fixed cost fitted on NeMo's latency: TensorRT-LLM's first token costs more than that (-31%)",
			Model: ttft(fp8(Models["llama-2-7b"]), h100, tp(1), 128)},
		{Name: "trtllm-llama2-70b-ttft-128", Source: trt, Config: "LLaMA 70B (Llama 2) FP8, TP 4, first token of 128 tokens", Unit: "ms", Value: 26,
			Lo: 0.45, Hi: 0.51, Gap: "as the 7B row, and 160 small allreduces charged at the tree's latency: -52%",
			Model: ttft(fp8(Models["llama-2-70b"]), h100, tp(4), 128)},
	}
	rows = append(rows, throughputRows()...)
	return rows
}

// HeldOutError is the root mean square of log(prediction / published)
// over rows no constant was fitted on (held out and known gaps), and how
// many: one figure for how far the model stands from what it was not fitted
// to, whatever each row's band. A row the model cannot price counts as
// NaN.
func HeldOutError(rows []Row) (rms float64, n int) {
	var sum float64
	for _, r := range rows {
		if r.Fitted != "" {
			continue
		}
		_, ratio, _ := r.Check()
		sum += math.Log(ratio) * math.Log(ratio)
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return math.Sqrt(sum / float64(n)), n
}

// String is the row as one line of a table.
func (r Row) String() string {
	pred, ratio, ok := r.Check()
	return r.Line(pred, ratio, ok)
}

// Line is the row as one line of a table, given what Check returned.
func (r Row) Line(pred, ratio float64, ok bool) string {
	verdict := "ok"
	if !ok {
		verdict = fmt.Sprintf("FAIL (band %.2f-%.2f)", r.Lo, r.Hi)
	}
	if r.Unit == "x" { // a ratio: two decimals
		return fmt.Sprintf("%-30s %9.2f %-4s %9.2f %+6.1f%%  %-9s %s", r.Name, r.Value, r.Unit, pred, 100*(ratio-1), r.Kind(), verdict)
	}
	return fmt.Sprintf("%-30s %9.1f %-4s %9.1f %+6.1f%%  %-9s %s", r.Name, r.Value, r.Unit, pred, 100*(ratio-1), r.Kind(), verdict)
}
