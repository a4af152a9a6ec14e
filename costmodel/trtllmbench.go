package costmodel

import (
	"fmt"
	"math"

	"github.com/rankrun/rankrun/topology"
)

// TRTLLMBenchKVFraction is trtllm-bench's --kv_cache_free_gpu_mem_fraction
// default (tensorrt_llm/bench/benchmark/throughput.py), which its settings
// heuristic sizes the KV cache by. perf-overview.md says "many cases" ran
// at 0.95 without naming them; the limits round up past either.
const TRTLLMBenchKVFraction = 0.90

// nvmlMiB is the GPU memory NVML reports (nvidia-smi's total) for the
// presets, which trtllm-bench's heuristic reads, where the datasheet's
// figure (HBMCapacity) is rounded: H100 80GB HBM3 81,559 MiB, H200
// 143,771 MiB, GB200 189,471 MiB (nvidia-smi as printed in public logs).
// A hardware file takes its HBMCapacity.
var nvmlMiB = map[string]float64{"h100-nvlink-ib400": 81559, "h200-nvlink-ib400": 143771, "gb200-nvl72": 189471}

// TRTLLMBench is the scheduler trtllm-bench's throughput command runs a
// dataset of in / out tokens under when it is given no max_batch_size or
// max_num_tokens, as NVIDIA's published throughput tables were run
// (perf-overview.md: "trtllm-bench --tp --pp --model throughput --dataset
// --backend pytorch"). Its heuristic (TensorRT-LLM
// tensorrt_llm/bench/build/tuning.py, calc_engine_setting and
// finetune_setting):
//
//   - the requests the KV cache holds: TRTLLMBenchKVFraction of the GPUs'
//     memory less the weights (parameters at 1 byte in FP8, 0.5 in NVFP4,
//     2 otherwise), over 2 x layers x max(TP, KV heads) x head dim x KV
//     bytes a token, for in+out tokens a request (GiB, as it reads NVML's
//     total: nvmlMiB);
//   - max_batch_size: that, capped at 4096 and over PP, rounded up
//     "optimistically" (to 32 below 256, at least 64; to 128 below 1024;
//     else to 256);
//   - max_num_tokens: max_batch_size x (1 + in/out), capped at 32768,
//     rounded up (to 256 below 4096, at least 2048; to 512 below 8192;
//     else to 1024), and, chunked prefill being off, at least in +
//     max_batch_size (tensorrt_llm/bench/benchmark/utils/general.py,
//     get_settings);
//   - the overlap scheduler on (disable_overlap_scheduler defaults to
//     false in the PyTorch backend's LLM API).
//
// The engine's KV cache itself is what the layout leaves (KVBlocks); the
// heuristic only sets the two limits. Under PP both are a micro-batch's in
// TensorRT-LLM; Scheduler's are a whole step's, so they come back PP
// times over.
//
// Where the estimate holds no request, trtllm-bench refuses to run, and
// so does this (ErrInvalid, naming the sizes).
func TRTLLMBench(m Model, hw Hardware, l topology.Layout, in, out int) (Scheduler, error) {
	const gib = 1 << 30
	bytesPer := map[string]float64{"fp8": 1, "fp4": 0.5}[m.Precision]
	if bytesPer == 0 {
		bytesPer = 2
	}
	memory := hw.HBMCapacity / gib
	if mib, ok := nvmlMiB[hw.Name]; ok {
		memory = mib / 1024
	}
	gpus := float64(l.TP * l.PP)
	perToken := 2 * float64(m.Layers) * float64(max(l.TP, m.KVHeads)) * float64(m.HeadDim) * float64(m.KVBytes) / gib
	cache := (memory*gpus - m.Params()*bytesPer/gib) * TRTLLMBenchKVFraction
	requests := cache / (perToken * float64(in+out))
	if !(requests >= 1) {
		return Scheduler{}, fmt.Errorf("%w: trtllm-bench: %s on %.0f x %s: its estimate of the KV cache (%.2f GiB) holds no request of %d tokens",
			ErrInvalid, m.Name, gpus, hw.Name, cache, in+out)
	}
	bs := math.Min(requests, 4096) / float64(l.PP)
	tokens := math.Min(bs*(1+float64(in)/float64(out)), 32768)
	up := func(v, step float64) int { return int(step * math.Ceil(v/step)) }
	var maxBatch, maxTokens int
	switch {
	case bs < 256:
		maxBatch = max(64, up(bs, 32))
	case bs < 1024:
		maxBatch = up(bs, 128)
	default:
		maxBatch = up(bs, 256)
	}
	switch {
	case tokens < 4096:
		maxTokens = max(2048, up(tokens, 256))
	case tokens < 8192:
		maxTokens = up(tokens, 512)
	default:
		maxTokens = up(tokens, 1024)
	}
	return Scheduler{MaxBatch: maxBatch * l.PP, MaxTokens: max(maxTokens, in+maxBatch) * l.PP, Overlap: true}, nil
}
