package costmodel

import (
	"fmt"
	"math"
	"sync"

	"github.com/rankrun/rankrun/topology"
)

// perfOverview is TensorRT-LLM's published offline throughput: every
// request queued at once (trtllm-bench throughput, PyTorch backend,
// ModelOpt FP8 and NVFP4 checkpoints with FP8 KV cache), total output
// tokens a second of the whole instance.
const perfOverview = "NVIDIA TensorRT-LLM docs/source/performance/perf-overview.md, \"Throughput Measurements\" (trtllm-bench, total output tokens/s)"

// perfPairs are the table's sequence lengths (in / out), in its order,
// and perfRequests the requests each was measured over ($num_requests in
// its "Preparing a Dataset" table).
var (
	perfPairs    = [10][2]int{{128, 128}, {128, 2048}, {128, 4096}, {500, 2000}, {1000, 1000}, {1000, 2000}, {2048, 128}, {2048, 2048}, {5000, 500}, {20000, 2000}}
	perfRequests = [10]int{30000, 3000, 1500, 3000, 3000, 1500, 3000, 1500, 1500, 1000}
)

// throughputRows are the table's columns this model has presets for:
// Llama-3.3-70B (the shape of llama-3-70b), Llama-3.1-8B (of llama-3-8b)
// and Llama-3.1-405B, in FP8 on H100 and H200 and in NVFP4 on GB200.
func throughputRows() []Row {
	cols := []struct {
		model, label, gpu, hw string
		fp4                   bool
		tp                    int
		tput                  [10]float64
	}{
		{"llama-3-70b", "70b", "h200", "h200-nvlink-ib400", false, 1, [10]float64{3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283}},
		{"llama-3-70b", "70b", "h100", "h100-nvlink-ib400", false, 2, [10]float64{6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437}},
		{"llama-3.1-405b", "405b", "h200", "h200-nvlink-ib400", false, 8, [10]float64{3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505}},
		{"llama-3.1-405b", "405b", "h100", "h100-nvlink-ib400", false, 8, [10]float64{3627, 4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345}},
		{"llama-3-8b", "8b", "h200", "h200-nvlink-ib400", false, 1, [10]float64{27911, 26221, 18027, 20770, 17744, 16828, 3538, 12194, 3902, 1804}},
		{"llama-3-8b", "8b", "h100", "h100-nvlink-ib400", false, 1, [10]float64{28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351}},
		// GB200 (NVL72), NVFP4 checkpoints (nvidia/Llama-3.3-70B-Instruct-FP4,
		// nvidia/Llama-3.1-405B-Instruct-FP4). The 70B column is the one
		// GB200FP4ComputeEff and GB200KVEff are fitted on; the 405B
		// column is held out.
		{"llama-3-70b", "70b", "gb200", "gb200-nvl72", true, 1, [10]float64{12189, 11309, 7849, 9028, 7326, 6513, 1450, 5646, 1602, 755}},
		{"llama-3.1-405b", "405b", "gb200", "gb200-nvl72", true, 4, [10]float64{6740, 8151, 6608, 6540, 5389, 5135, 797, 4407, 1112, 739}},
	}
	// Known gaps: today's ratio, kept in a band of 0.09 so a change to it
	// is seen. All four are 405B decode-heavy rows on the smaller memory
	// or under TP 4.
	gaps := map[string]struct {
		ratio float64
		why   string
	}{
		"tput-405b-h100-tp8-128/4096": {1.364, "not explained: KV-bound at 156 requests, a step is its weights, GEMMs and 252 allreduces of 5 MB (36 ms in the model; the published figure implies 50 ms), and the other 405B H100 rows are within 18%; candidates, neither modelled: trtllm-bench pads a decode batch of 156 to its CUDA graph of 256 (tried across the table: the held-out error grew), and the allreduces' fixed cost"},
		// GB200: the 405B TP4 decode-heavy rows run slower than the model
		// fitted on the 70B TP1 column.
		"tput-405b-gb200-tp4-128/4096":  {1.261, "partly explained: at 400 to 700 requests the 405B's FP4 GEMMs pace its steps, where on the 70B column the efficiencies were fitted on the KV cache does, so GB200FP4ComputeEff is weakly held by its fit and carries the error (also 500/2000 and 1000/2000); an FP4 GEMM efficiency by shape is not modelled"},
		"tput-405b-gb200-tp4-500/2000":  {1.263, "as 128/4096"},
		"tput-405b-gb200-tp4-1000/2000": {1.307, "as 128/4096"},
	}
	lo, hi := 1-Tolerance, 1+Tolerance
	var rows []Row
	for _, c := range cols {
		m, prec := fp8(Models[c.model]), "FP8"
		if c.fp4 {
			m, prec = fp4(Models[c.model]), "NVFP4"
		}
		hw := Hardwares[c.hw]
		l := topology.Layout{TP: c.tp, PP: 1, CP: 1, DP: 1}
		for i, pr := range perfPairs {
			in, out := pr[0], pr[1]
			sch, _ := TRTLLMBench(m, hw, l, in, out) // an error prices the row NaN: its check fails
			r := Row{Name: fmt.Sprintf("tput-%s-%s-tp%d-%d/%d", c.label, c.gpu, c.tp, in, out), Source: perfOverview,
				Config: fmt.Sprintf("%s %s on %d %s (TP %d), %d in / %d out, max throughput: %d requests at once under trtllm-bench's scheduler (%s)",
					c.model, prec, c.tp, c.gpu, c.tp, in, out, perfRequests[i], sch),
				Unit: "tok/s", Value: c.tput[i], Lo: lo, Hi: hi, Model: benchThroughput(m, hw, l, in, out, perfRequests[i])}
			if c.fp4 && c.label == "70b" {
				r.Fitted, r.Joint = fmt.Sprintf("GB200FP4ComputeEff (%.2f) and GB200KVEff (%.2f), on this column together", GB200FP4ComputeEff, GB200KVEff), true
			}
			if g, ok := gaps[r.Name]; ok {
				r.Lo, r.Hi, r.Gap = g.ratio-0.045, g.ratio+0.045, g.why
			}
			if r.Name == "tput-70b-h100-tp2-2048/2048" {
				r.Lo, r.Hi, r.Fitted = 0.95, 1.05, fmt.Sprintf("DefaultKVEff (%.2f)", DefaultKVEff)
			}
			rows = append(rows, r)
		}
	}
	rows = append(rows, deepSeekRow())
	// TP against PP on one 8-GPU H200 node, as ratios (the blog gives
	// them so): TP's allreduces of every layer cost it at max throughput,
	// where each PP stage streams its own layers; at batch 1 a PP step
	// walks all eight stages, each reading its weights, one after another.
	h200, m405 := Hardwares["h200-nvlink-ib400"], fp8(Models["llama-3.1-405b"])
	tp8, pp8 := topology.Layout{TP: 8, PP: 1, CP: 1, DP: 1}, topology.Layout{TP: 1, PP: 8, CP: 1, DP: 1}
	const blog = "NVIDIA technical blog, \"Boosting Llama 3.1 405B Throughput by Another 1.5x on NVIDIA H200 Tensor Core GPUs and NVLink Switch\" (Oct 2024)"
	rows = append(rows,
		Row{Name: "405b-h200-pp8-over-tp8-tput", Source: blog, Unit: "x", Value: 1.5, Lo: lo, Hi: hi,
			Config: "Llama-3.1-405B FP8, 8 H200: max throughput of PP 8 over TP 8 (the model at 1000 in / 1000 out)",
			Model: func() float64 {
				return offlineThroughput(m405, h200, pp8, 1000, 1000)() / offlineThroughput(m405, h200, tp8, 1000, 1000)()
			}},
		Row{Name: "405b-h200-tp8-over-pp8-latency", Source: blog, Unit: "x", Value: 5.6, Lo: lo, Hi: hi,
			Config: "Llama-3.1-405B FP8, 8 H200: batch-1 output tokens/s of TP 8 over PP 8 (the model at a 1000-token context)",
			Model: func() float64 {
				step := func(l topology.Layout) float64 {
					return Placement{Model: m405, HW: h200, Ctx: l, Gen: l}.Decode([]Seq{{Tokens: 1000}}).Seconds()
				}
				return step(pp8) / step(tp8)
			}})
	return rows
}

// fp8 is m as a ModelOpt FP8 checkpoint runs it: FP8 weights, KV cache and
// matmuls.
func fp8(m Model) Model {
	m.WeightBytes, m.KVBytes, m.Precision = 1, 1, "fp8"
	return m
}

// fp4 is m as a ModelOpt NVFP4 checkpoint runs it on Blackwell: weights
// in NVFP4 (4-bit values, an FP8 scale per 16: 4.5 bits a parameter),
// FP8 KV cache, matmuls at the FP4 rate.
func fp4(m Model) Model {
	m.WeightBytes, m.KVBytes, m.Precision = 4.5/8, 1, "fp4"
	return m
}

// benchThroughput is the model's figure for one cell of perf-overview's
// table, measured as the table was: the cell's requests, all queued at
// once, run to the end (Benchmark) under the scheduler trtllm-bench picks
// for them (TRTLLMBench). NaN when the model cannot run it. The run is
// priced once: its arguments are values but for hw's PeakFLOPs and
// ComputeEffBy maps, which it shares with the Hardwares presets and which
// nothing writes (a caller that did would get this row's first figure).
func benchThroughput(m Model, hw Hardware, l topology.Layout, in, out, requests int) func() float64 {
	return sync.OnceValue(func() float64 {
		sch, err := TRTLLMBench(m, hw, l, in, out)
		if err != nil {
			return math.NaN()
		}
		r, err := Placement{Model: m, HW: hw}.Benchmark(l, Benchmark{Requests: requests, In: in, Out: out, Scheduler: sch})
		if err != nil {
			return math.NaN()
		}
		return r.Throughput
	})
}

// offlineThroughput is the model's offline throughput of m on hw under l,
// at the scheduler's defaults; chunked prefill where a prompt exceeds the
// token budget (trtllm-bench sizes its own; a 20,000-token prompt cannot
// run without). NaN when the model cannot run it.
func offlineThroughput(m Model, hw Hardware, l topology.Layout, in, out int) func() float64 {
	return func() float64 {
		st, err := Placement{Model: m, HW: hw}.Offline(l, Scheduler{Chunked: in > DefaultMaxTokens}, in, out)
		if err != nil {
			return math.NaN()
		}
		return st.Throughput
	}
}

// deepSeekRow is the one published MoE row: DeepSeek-R1 (FP8 checkpoint,
// BF16 KV cache) at max throughput on one 8-GPU H200 node with attention
// DP 8 and EP 8 (TensorRT-LLM's --tp 8 --ep 8 with enable_attention_dp),
// each rank at most 128 requests and 1151 tokens a step, 1024 requests in
// flight, synthetic prompts of exactly 1024 tokens and outputs of 2048, no
// MTP. It is held out, and a known gap: the model runs 1.48x fast. Two
// things closed most of the 2.35x it ran before: attention's core at the
// KV cache's bf16, not the weights' fp8, and the step waiting on the one
// DP index that prefills (40% of steps hold one, each twice as long as a
// decode-only step; TensorRT-LLM's "ADP Balance Strategy" blog names this
// imbalance). What is left fits a compute efficiency about a third below
// the fitted one (half of it leaves 0.93x; half the weight-read efficiency
// leaves 1.09x): small expert GEMMs and MLA on Hopper, not modelled.
func deepSeekRow() Row {
	const src = "NVIDIA TensorRT-LLM docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md, \"H200 max-throughput\" (trtllm-bench at commit b6261862, total output tokens/s)"
	m, hw := Models["deepseek-r1"], Hardwares["h200-nvlink-ib400"]
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 8, EP: 8, AttentionDP: true}
	const ratio = 1.48
	return Row{Name: "tput-dsr1-h200-dp8-ep8-adp-1024/2048", Source: src,
		Config: "deepseek-r1 FP8 (BF16 KV) on 8 h200 (dp=8,ep=8,adp: attention DP 8, EP 8), max_batch_size 128 and max_num_tokens 1151 a rank, 1024 in / 2048 out, 1024 requests in flight, max throughput",
		Unit:   "tok/s", Value: 11489.3, Lo: ratio - 0.045, Hi: ratio + 0.045,
		Gap: "partly explained: runs 1.48x fast (2.35x before attention's core ran at the KV cache's bf16 and a step waited on its one prefilling DP index); the rest fits a compute efficiency about a third below the fitted one (half of it leaves 0.93x, half the weight-read efficiency 1.09x); suspects: expert GEMMs at 32 tokens an expert, MLA on Hopper, neither modelled",
		Model: func() float64 {
			st, err := Placement{Model: m, HW: hw}.Offline(l, Scheduler{MaxBatch: 128, MaxTokens: 1151}, 1024, 2048)
			if err != nil {
				return math.NaN()
			}
			return st.Throughput
		}}
}
