package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/topology"
)

const throughputExamples = `  rankrun throughput --model llama-3-70b --precision fp8 --hardware h100 --layout tp=2 --in 1000 --out 1000
  rankrun throughput --model llama-3.1-405b --precision fp8 --hardware h200 --layout tp=8 --layout pp=8 --in 2048 --out 2048
  rankrun throughput --model llama-3-8b --hardware h200 --layout tp=1 --in 20000 --out 2000 --chunked --json
  rankrun throughput --model llama-3-8b --precision fp8 --hardware h100 --layout tp=1 --in 128 --out 4096 --requests 1500 --trtllm-bench
`

// throughputRow is one layout's line of rankrun throughput (and its JSON).
type throughputRow struct {
	Layout       string  `json:"layout"`
	GPUs         int     `json:"gpus"`
	Batch        float64 `json:"batch"` // requests resident per DP index
	Bound        string  `json:"bound"` // kv, max_batch or max_tokens
	StepMS       float64 `json:"step_ms"`
	Throughput   float64 `json:"throughput_tok_s"`
	PerGPU       float64 `json:"throughput_tok_s_gpu"`
	PrefillsStep float64 `json:"prefills_per_step,omitempty"`
	// Scheduler is the limits the layout ran under (each layout's own
	// under --trtllm-bench).
	Scheduler string `json:"scheduler"`
	// SchedulerNote says, under PP with --trtllm-bench, that Scheduler's
	// limits are a whole step's, PP times trtllm-bench's own.
	SchedulerNote string `json:"scheduler_note,omitempty"`
	// Steps is a finite run's (--requests): its steps, and Batch the most
	// requests it held at once.
	Steps int `json:"steps,omitempty"`
}

// throughputCmd prints the cost model's offline steady state of each
// layout (every request queued at once, an aggregated instance batching
// in flight under the scheduler's limits), or with --requests a finite run
// of that many, as trtllm-bench measures one.
func throughputCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("throughput", "The cost model's offline throughput of an aggregated instance (prefill and decode on the same ranks)\n"+
		"for each --layout: every request of --in prompt and --out generated tokens queued at once, batched in flight\n"+
		"under the scheduler's limits (TensorRT-LLM's defaults). Prints, per layout, the batch and what holds it\n"+
		"(kv: the KV cache is full; max_batch; max_tokens: the step's token budget), the step and the output tokens/s.\n"+
		"With --requests N, a run of N such requests to its end instead (waves, ramp and tail; the batch column is\n"+
		"the most requests held at once, the step its mean); --trtllm-bench picks each layout's limits as\n"+
		"trtllm-bench does, which is how NVIDIA's published throughput tables were measured (rankrun validate).",
		throughputExamples, stderr)
	var layouts runspec.MultiFlag // repeatable --layout
	fs.Var(&layouts, "layout", "a layout (tp, pp, dp, adp; cp=1), repeatable: tp=8 or tp=2,dp=2")
	model := fs.String("model", "", "model preset ("+strings.Join(costmodel.ModelNames(), " | ")+") or a JSON file (required)")
	precision := fs.String("precision", "", "run the model's weights, KV cache and matmuls in this precision: fp8 (1 byte each), fp4, bf16 (\"\": the model's own)")
	hardware := fs.String("hardware", "h100", "GPU preset ("+strings.Join(costmodel.HardwareNames(), " | ")+") or a JSON file")
	in := fs.Int("in", 1000, "prompt tokens of every request (>= 1)")
	out := fs.Int("out", 1000, "generated tokens of every request (>= 1)")
	maxBatch := fs.Int("max-batch", costmodel.DefaultMaxBatch, "most requests one step holds (>= 1)")
	maxTokens := fs.Int("max-tokens", costmodel.DefaultMaxTokens, "token budget of one step: prompt tokens prefilled plus one per decoding request (>= 1)")
	chunked := fs.Bool("chunked", false, "chunked prefill: a prompt longer than --max-tokens prefills over several steps")
	overlap := fs.Bool("overlap", false, "overlap scheduler: the host prepares a step while the GPU runs the one before (a step takes the longer, not the sum)")
	requests := fs.Int("requests", 0, "a finite run of this many requests, all queued at once, to the last one's end (0: the steady state)")
	bench := fs.Bool("trtllm-bench", false, "each layout's limits as trtllm-bench picks them (max batch and tokens from its KV heuristic, no chunking, overlap on); needs --requests")
	jsonOut := fs.Bool("json", false, "print the rows as JSON on stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var limits []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "max-batch" || f.Name == "max-tokens" || f.Name == "chunked" || f.Name == "overlap" {
			limits = append(limits, "--"+f.Name)
		}
	})
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
	case *requests < 0 || *requests > maxRequests:
		return usagef("throughput: --requests %d: must be in [1, %d] (or 0: the steady state)", *requests, maxRequests)
	case *bench && *requests == 0:
		return usagef("throughput: --trtllm-bench: needs --requests (trtllm-bench measures a finite run)")
	case *bench && len(limits) > 0:
		return usagef("throughput: --trtllm-bench picks the limits itself: drop %s", strings.Join(limits, " "))
	}
	sch := costmodel.Scheduler{MaxBatch: *maxBatch, MaxTokens: *maxTokens, Chunked: *chunked, Overlap: *overlap}
	var rows []throughputRow
	for _, spec := range layouts {
		l, err := topology.ParseLayout(spec)
		if err != nil {
			return usagef("throughput: --layout %s: %v", spec, err)
		}
		row, err := throughputOf(p, l, sch, *in, *out, *requests, *bench)
		if err != nil {
			return usagef("throughput: --layout %s: %v", spec, err)
		}
		rows = append(rows, row)
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	var b strings.Builder
	run := ""
	if *requests > 0 {
		run = fmt.Sprintf(", a run of %d requests", *requests)
	}
	if *bench {
		fmt.Fprintf(&b, "%s on %s, %d in / %d out%s, trtllm-bench's limits a layout\n", p.Model.Name, p.HW.Name, *in, *out, run)
	} else {
		fmt.Fprintf(&b, "%s on %s, %d in / %d out%s, %s\n", p.Model.Name, p.HW.Name, *in, *out, run, sch)
	}
	fmt.Fprintf(&b, "%-22s %4s %8s %-10s %10s %12s %12s\n", "layout", "gpus", "batch", "bound", "step ms", "tok/s", "tok/s/gpu")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s %4d %8.1f %-10s %10.2f %12.0f %12.0f\n", r.Layout, r.GPUs, r.Batch, r.Bound, r.StepMS, r.Throughput, r.PerGPU)
	}
	if *bench {
		for _, r := range rows {
			fmt.Fprintf(&b, "%s: %s", r.Layout, r.Scheduler)
			if r.SchedulerNote != "" {
				fmt.Fprintf(&b, " (%s)", r.SchedulerNote)
			}
			b.WriteString("\n")
		}
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// maxRequests bounds --requests: a finite run is priced step by step
// (its decode stretches in closed form). A million requests at 128 in /
// 128 out under the default limits take a tenth of a second; at the worst,
// one request a step over PP 8, about half a minute a layout.
const maxRequests = 1_000_000

// throughputOf is one layout's row: Offline's steady state, or with
// requests > 0 a finite run of that many (Benchmark), under sch or
// (bench) under the limits trtllm-bench picks for the layout.
func throughputOf(p costmodel.Placement, l topology.Layout, sch costmodel.Scheduler, in, out, requests int, bench bool) (throughputRow, error) {
	if bench {
		var err error
		if sch, err = costmodel.TRTLLMBench(p.Model, p.HW, l, in, out); err != nil {
			return throughputRow{}, err
		}
	}
	row := throughputRow{Layout: l.String(), GPUs: l.Ranks(), Scheduler: sch.String()}
	if bench && l.PP > 1 {
		row.SchedulerNote = fmt.Sprintf("a step's; trtllm-bench's max_batch_size and max_num_tokens are a micro-batch's, 1/%d of them", l.PP)
	}
	if requests == 0 {
		st, err := p.Offline(l, sch, in, out)
		if err != nil {
			return row, err
		}
		row.Batch, row.Bound, row.StepMS, row.Throughput, row.PrefillsStep = st.Batch, st.Bound, float64(st.Step.Microseconds())/1e3, st.Throughput, st.Prefills
	} else {
		r, err := p.Benchmark(l, costmodel.Benchmark{Requests: requests, In: in, Out: out, Scheduler: sch})
		if err != nil {
			return row, err
		}
		row.Batch, row.Bound, row.StepMS, row.Throughput, row.Steps = float64(r.Resident), "run", r.Duration.Seconds()*1e3/float64(r.Steps), r.Throughput, r.Steps
	}
	row.PerGPU = row.Throughput / float64(l.Ranks())
	return row, nil
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
		return p, usagef("throughput: --hardware %s has no compute figures (it models links only): pick %s or a hardware file", hardware, strings.Join(runspec.ComputeHardware(), ", "))
	}
	if hw.Peak(m.Precision) == 0 {
		return p, usagef("throughput: --hardware %s has no %s peak (--model %s computes in %s)", hardware, m.Precision, model, m.Precision)
	}
	if x := m.ExpertPrecision; x != "" && hw.Peak(x) == 0 {
		return p, usagef("throughput: --hardware %s has no %s peak (--model %s computes its experts in %s)", hardware, x, model, x)
	}
	return p, nil
}
