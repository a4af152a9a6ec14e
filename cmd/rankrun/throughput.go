package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

const throughputExamples = `  rankrun throughput --model llama-3-70b --precision fp8 --hardware h100 --layout tp=2 --in 1000 --out 1000
  rankrun throughput --model llama-3.1-405b --precision fp8 --hardware h200 --layout tp=8 --layout pp=8 --in 2048 --out 2048
  rankrun throughput --model llama-3-8b --hardware h200 --layout tp=1 --in 20000 --out 2000 --chunked --json
`

// layoutList is a repeatable --layout flag.
type layoutList []string

func (l *layoutList) String() string     { return strings.Join(*l, " ") }
func (l *layoutList) Set(v string) error { *l = append(*l, v); return nil }

// throughputRow is one layout's line of rankrun throughput (and its JSON).
type throughputRow struct {
	Layout       string  `json:"layout"`
	GPUs         int     `json:"gpus"`
	Batch        float64 `json:"batch"` // requests resident per DP index
	Bound        string  `json:"bound"` // kv, max_batch or max_tokens
	StepMS       float64 `json:"step_ms"`
	Throughput   float64 `json:"throughput_tok_s"`
	PerGPU       float64 `json:"throughput_tok_s_gpu"`
	PrefillsStep float64 `json:"prefills_per_step"`
}

// throughputCmd prints the cost model's offline steady state of each
// layout: every request queued at once, an aggregated instance batching
// in flight under the scheduler's limits.
func throughputCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("throughput", "The cost model's offline throughput of an aggregated instance (prefill and decode on the same ranks)\n"+
		"for each --layout: every request of --in prompt and --out generated tokens queued at once, batched in flight\n"+
		"under the scheduler's limits (TensorRT-LLM's defaults). Prints, per layout, the batch and what holds it\n"+
		"(kv: the KV cache is full; max_batch; max_tokens: the step's token budget), the step and the output tokens/s.",
		throughputExamples, stderr)
	var layouts layoutList
	fs.Var(&layouts, "layout", "a layout (tp, pp, dp, adp; cp=1), repeatable: tp=8 or tp=2,dp=2")
	model := fs.String("model", "", "model preset ("+strings.Join(costmodel.ModelNames(), " | ")+") or a JSON file (required)")
	precision := fs.String("precision", "", "run the model's weights, KV cache and matmuls in this precision: fp8 (1 byte each), fp4, bf16 (\"\": the model's own)")
	hardware := fs.String("hardware", "h100", "GPU preset ("+strings.Join(costmodel.HardwareNames(), " | ")+") or a JSON file")
	in := fs.Int("in", 1000, "prompt tokens of every request (>= 1)")
	out := fs.Int("out", 1000, "generated tokens of every request (>= 1)")
	maxBatch := fs.Int("max-batch", costmodel.DefaultMaxBatch, "most requests one step holds (>= 1)")
	maxTokens := fs.Int("max-tokens", costmodel.DefaultMaxTokens, "token budget of one step: prompt tokens prefilled plus one per decoding request (>= 1)")
	chunked := fs.Bool("chunked", false, "chunked prefill: a prompt longer than --max-tokens prefills over several steps")
	jsonOut := fs.Bool("json", false, "print the rows as JSON on stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := throughputPlacement(*model, *precision, *hardware)
	if err != nil {
		return err
	}
	switch {
	case len(layouts) == 0:
		return usagef("throughput: --layout is required (e.g. --layout tp=2)")
	case *in < 1 || *out < 1:
		return usagef("throughput: --in %d --out %d: both must be at least 1", *in, *out)
	case *maxBatch < 1:
		return usagef("throughput: --max-batch %d: must be at least 1", *maxBatch)
	case *maxTokens < 1:
		return usagef("throughput: --max-tokens %d: must be at least 1", *maxTokens)
	}
	sch := costmodel.Scheduler{MaxBatch: *maxBatch, MaxTokens: *maxTokens, Chunked: *chunked}
	var rows []throughputRow
	for _, spec := range layouts {
		l, err := topology.ParseLayout(spec)
		if err != nil {
			return usagef("throughput: --layout %s: %v", spec, err)
		}
		st, err := p.Offline(l, sch, *in, *out)
		if err != nil {
			return usagef("throughput: --layout %s: %v", spec, err)
		}
		rows = append(rows, throughputRow{Layout: l.String(), GPUs: l.Ranks(), Batch: st.Batch, Bound: st.Bound,
			StepMS: float64(st.Step.Microseconds()) / 1e3, Throughput: st.Throughput, PerGPU: st.Throughput / float64(l.Ranks()), PrefillsStep: st.Prefills})
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s, %d in / %d out, %s\n", p.Model.Name, p.HW.Name, *in, *out, sch)
	fmt.Fprintf(&b, "%-22s %4s %8s %-10s %10s %12s %12s\n", "layout", "gpus", "batch", "bound", "step ms", "tok/s", "tok/s/gpu")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s %4d %8.1f %-10s %10.2f %12.0f %12.0f\n", r.Layout, r.GPUs, r.Batch, r.Bound, r.StepMS, r.Throughput, r.PerGPU)
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// throughputPlacement resolves --model, --precision and --hardware.
func throughputPlacement(model, precision, hardware string) (costmodel.Placement, error) {
	if model == "" {
		return costmodel.Placement{}, usagef("throughput: --model is required (%s, or a JSON file)", strings.Join(costmodel.ModelNames(), ", "))
	}
	m, err := costmodel.ResolveModel(model)
	if err != nil {
		return costmodel.Placement{}, usagef("throughput: --model %s: %v", model, err)
	}
	if precision != "" {
		m.ExpertPrecision = "" // the whole model at the precision asked
	}
	switch precision {
	case "":
	case "fp8":
		m.WeightBytes, m.KVBytes, m.Precision = 1, 1, "fp8"
	case "fp4": // NVFP4: 4.5 bits a weight with its block scales; FP8 KV
		m.WeightBytes, m.ExpertWeightBytes, m.KVBytes, m.Precision = 4.5/8, 0, 1, "fp4"
	case "bf16":
		m.WeightBytes, m.KVBytes, m.Precision = 2, 2, "bf16"
	default:
		return costmodel.Placement{}, usagef("throughput: --precision %q: must be fp8, fp4, bf16 or \"\" (the model's own)", precision)
	}
	hw, err := costmodel.ResolveHardware(hardware)
	if err != nil {
		return costmodel.Placement{}, usagef("throughput: --hardware %s: %v", hardware, err)
	}
	p := costmodel.Placement{Model: m, HW: hw}
	if err := m.Validate(); err != nil {
		return p, usagef("throughput: --model %s: %v", model, err)
	}
	if err := hw.Validate(); err != nil {
		return p, usagef("throughput: --hardware %s: %v", hardware, err)
	}
	if !hw.Compute() {
		return p, usagef("throughput: --hardware %s has no compute figures (it models links only): pick %s or a hardware file", hardware, strings.Join(computeHardware(), ", "))
	}
	if hw.Peak(m.Precision) == 0 {
		return p, usagef("throughput: --hardware %s has no %s peak (--model %s computes in %s)", hardware, m.Precision, model, m.Precision)
	}
	if x := m.ExpertPrecision; x != "" && hw.Peak(x) == 0 {
		return p, usagef("throughput: --hardware %s has no %s peak (--model %s computes its experts in %s)", hardware, x, model, x)
	}
	return p, nil
}
