package costmodel

import (
	"fmt"
	"sort"
	"strings"
)

// Models are the model presets. Each shape is the model's published
// config.json (Hugging Face), cited beside it; weights, KV and activations
// are bf16 unless the model ships otherwise.
var Models = map[string]Model{
	// meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096,
	// intermediate_size 14336, num_hidden_layers 32, num_attention_heads
	// 32, num_key_value_heads 8, vocab_size 128256 (head dim 4096/32).
	// 8.03B parameters (model card).
	"llama-3-8b": {Name: "llama-3-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, FFN: 14336, Vocab: 128256,
		WeightBytes: 2, KVBytes: 2, ActBytes: 2, Precision: "bf16", Source: "huggingface.co/meta-llama/Meta-Llama-3-8B config.json"},
	// meta-llama/Meta-Llama-3-70B config.json: hidden_size 8192,
	// intermediate_size 28672, num_hidden_layers 80, num_attention_heads
	// 64, num_key_value_heads 8, vocab_size 128256. 70.6B parameters.
	"llama-3-70b": {Name: "llama-3-70b", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, FFN: 28672, Vocab: 128256,
		WeightBytes: 2, KVBytes: 2, ActBytes: 2, Precision: "bf16", Source: "huggingface.co/meta-llama/Meta-Llama-3-70B config.json"},
	// meta-llama/Llama-2-7b-hf config.json: hidden_size 4096,
	// intermediate_size 11008, 32 layers, 32 attention heads, 32 KV
	// heads (MHA), vocab_size 32000. The model of TensorRT-LLM's
	// published latency table (the validation test).
	"llama-2-7b": {Name: "llama-2-7b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 32, HeadDim: 128, FFN: 11008, Vocab: 32000,
		WeightBytes: 2, KVBytes: 2, ActBytes: 2, Precision: "bf16", Source: "huggingface.co/meta-llama/Llama-2-7b-hf config.json"},
	// meta-llama/Llama-2-70b-hf config.json: hidden_size 8192,
	// intermediate_size 28672, 80 layers, 64 heads, 8 KV heads,
	// vocab_size 32000.
	"llama-2-70b": {Name: "llama-2-70b", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, FFN: 28672, Vocab: 32000,
		WeightBytes: 2, KVBytes: 2, ActBytes: 2, Precision: "bf16", Source: "huggingface.co/meta-llama/Llama-2-70b-hf config.json"},
	// meta-llama/Llama-3.1-405B config.json: hidden_size 16384,
	// intermediate_size 53248, num_hidden_layers 126, num_attention_heads
	// 128, num_key_value_heads 8, vocab_size 128256. 405.9B parameters.
	"llama-3.1-405b": {Name: "llama-3.1-405b", Layers: 126, Hidden: 16384, Heads: 128, KVHeads: 8, HeadDim: 128, FFN: 53248, Vocab: 128256,
		WeightBytes: 2, KVBytes: 2, ActBytes: 2, Precision: "bf16", Source: "huggingface.co/meta-llama/Llama-3.1-405B config.json"},
	// deepseek-ai/deepseek-moe-16b-base config.json: hidden_size 2048,
	// intermediate_size 10944 (the dense first layer), moe_intermediate_size
	// 1408, num_hidden_layers 28, num_attention_heads 16,
	// num_key_value_heads 16, n_routed_experts 64, num_experts_per_tok 6,
	// n_shared_experts 2, first_k_dense_replace 1, vocab_size 102400.
	// DeepSeekMoE (arXiv:2401.06066): 16.4B parameters, 2.8B active: the
	// fine-grained routed experts plus shared experts of DeepSeek's MoE
	// line, with standard multi-head attention (no MLA).
	"deepseek-moe-16b": {Name: "deepseek-moe-16b", Layers: 28, Hidden: 2048, Heads: 16, KVHeads: 16, HeadDim: 128, FFN: 10944, Vocab: 102400,
		WeightBytes: 2, KVBytes: 2, ActBytes: 2, Precision: "bf16", Experts: 64, ActiveExperts: 6, SharedExperts: 2, ExpertFFN: 1408, DenseLayers: 1,
		Source: "huggingface.co/deepseek-ai/deepseek-moe-16b-base config.json; arXiv:2401.06066"},
	// deepseek-ai/DeepSeek-R1 config.json (DeepSeek-V3's architecture):
	// hidden_size 7168, intermediate_size 18432 (the dense layers),
	// moe_intermediate_size 2048, num_hidden_layers 61,
	// num_attention_heads 128, num_key_value_heads 128, n_routed_experts
	// 256, num_experts_per_tok 8, n_shared_experts 1, first_k_dense_replace
	// 3, n_group 8, topk_group 4 (a token's experts come from 4 of 8
	// groups), kv_lora_rank 512, q_lora_rank 1536, qk_rope_head_dim 64,
	// qk_nope_head_dim 128, v_head_dim 128, vocab_size 129280; weights FP8
	// (e4m3, 128x128 block scales). 671B parameters, 37B active
	// (arXiv:2412.19437); the multi-token-prediction layer is not
	// modelled. MLA caches 576 elements a token and layer, kept bf16 here
	// (kv_bytes 2: the checkpoint names no KV dtype; a JSON file sets 1 for
	// an FP8 cache).
	"deepseek-r1": {Name: "deepseek-r1", Layers: 61, Hidden: 7168, Heads: 128, KVHeads: 128, HeadDim: 128, FFN: 18432, Vocab: 129280,
		WeightBytes: 1, KVBytes: 2, ActBytes: 2, Precision: "fp8", Experts: 256, ActiveExperts: 8, SharedExperts: 1, ExpertFFN: 2048, DenseLayers: 3,
		ExpertGroups: 8, GroupsPerToken: 4, KVLoRA: 512, QLoRA: 1536, RopeDim: 64,
		Source: "huggingface.co/deepseek-ai/DeepSeek-R1 config.json; DeepSeek-V3 technical report (arXiv:2412.19437)"},
	// nvidia/DeepSeek-R1-FP4: DeepSeek-R1 with its experts in NVFP4 (4
	// bits and an FP8 scale per 16 values: 4.5 bits a parameter) and their
	// matmuls at Blackwell's FP4 rate; attention stays FP8, weights and
	// matmuls (the model card: linear operators in the transformer blocks
	// quantized to FP4, about 1.6x less memory than FP8, this split giving
	// 1.75x; the v2 checkpoint's card: "compared to nvidia/DeepSeek-R1-FP4,
	// this checkpoint additionally quantizes the wo module in attention
	// layers"; ModelOpt NVFP4 checkpoints exclude self_attn). The seed's
	// ctx1_dep4_gen1_tep8 layouts ran it on GB200.
	"deepseek-r1-fp4": {Name: "deepseek-r1-fp4", Layers: 61, Hidden: 7168, Heads: 128, KVHeads: 128, HeadDim: 128, FFN: 18432, Vocab: 129280,
		WeightBytes: 1, ExpertWeightBytes: 4.5 / 8, KVBytes: 2, ActBytes: 2, Precision: "fp8", ExpertPrecision: "fp4", Experts: 256, ActiveExperts: 8, SharedExperts: 1, ExpertFFN: 2048, DenseLayers: 3,
		ExpertGroups: 8, GroupsPerToken: 4, KVLoRA: 512, QLoRA: 1536, RopeDim: 64,
		Source: "huggingface.co/nvidia/DeepSeek-R1-FP4 and DeepSeek-R1-NVFP4-v2 model cards; huggingface.co/deepseek-ai/DeepSeek-R1 config.json"},
	// openai/gpt-oss-120b config.json: hidden_size 2880, intermediate_size
	// 2880 (per expert), num_hidden_layers 36, num_attention_heads 64,
	// num_key_value_heads 8, head_dim 64, num_local_experts 128,
	// num_experts_per_tok 4, vocab_size 201088. The model card: 116.8B
	// parameters, 5.1B active, MoE weights in MXFP4 (4.25 bits per
	// parameter), the rest bf16; matmuls run in bf16 on Hopper. Half its
	// layers use a 128-token sliding window: not modelled (every layer is
	// dense attention here, an over-estimate of long-context attention).
	"gpt-oss-120b": {Name: "gpt-oss-120b", Layers: 36, Hidden: 2880, Heads: 64, KVHeads: 8, HeadDim: 64, Vocab: 201088,
		WeightBytes: 2, ExpertWeightBytes: 4.25 / 8, KVBytes: 2, ActBytes: 2, Precision: "bf16", Experts: 128, ActiveExperts: 4, ExpertFFN: 2880,
		Source: "huggingface.co/openai/gpt-oss-120b config.json; gpt-oss model card (arXiv:2508.10925)"},
}

// ModelNames lists the model presets, sorted.
func ModelNames() []string { return sortedKeys(Models) }

// ParseModel returns the named preset; the error lists the valid names.
func ParseModel(name string) (Model, error) {
	m, ok := Models[name]
	if !ok {
		return Model{}, fmt.Errorf("costmodel: unknown model %q (valid: %s, or a JSON file)", name, strings.Join(ModelNames(), ", "))
	}
	return m, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
