package costmodel

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/rankrun/rankrun/topology"
)

// ErrInvalid: a model or hardware description breaks a rule. The message
// names the field and the rule.
var ErrInvalid = errors.New("costmodel: invalid description")

// Model describes a decoder-only transformer: its shape, the bytes of its
// weights and KV cache, and its experts. Attention is grouped-query (Heads
// query heads share KVHeads key/value heads of HeadDim elements); every FFN
// is gated (three matrices: gate, up, down). An MoE layer has Experts routed
// experts of ExpertFFN intermediate size, ActiveExperts of them per token,
// plus SharedExperts always active; its first DenseLayers layers have a
// dense FFN of size FFN instead.
//
// With KVLoRA > 0 attention is DeepSeek's multi-head latent attention
// (MLA, arXiv:2405.04434): the cache holds one compressed latent of KVLoRA
// elements plus a RopeDim-element positional key per token and layer,
// shared by every head (so every TP rank holds all of it); queries go
// through a QLoRA-rank compression (0: none), keys are HeadDim+RopeDim
// elements a head and values HeadDim.
type Model struct {
	Name    string `json:"name"`
	Layers  int    `json:"layers"`
	Hidden  int    `json:"hidden"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	HeadDim int    `json:"head_dim"`
	FFN     int    `json:"ffn"` // dense FFN intermediate size
	Vocab   int    `json:"vocab"`

	// WeightBytes per parameter (2 bf16, 1 fp8); ExpertWeightBytes for
	// the routed and shared experts when they differ (0: WeightBytes),
	// e.g. 4.25 bits for MXFP4 experts.
	WeightBytes       float64 `json:"weight_bytes"`
	ExpertWeightBytes float64 `json:"expert_weight_bytes,omitempty"`
	KVBytes           int     `json:"kv_bytes"`  // bytes per KV element
	ActBytes          int     `json:"act_bytes"` // bytes per activation element in collectives
	// Precision of the matrix multiplies: bf16, fp8 or fp4. It picks the
	// hardware's peak. ExpertPrecision is the experts' (routed and
	// shared) where it differs ("": Precision), as in an NVFP4 checkpoint
	// whose attention stays FP8.
	Precision       string `json:"precision"`
	ExpertPrecision string `json:"expert_precision,omitempty"`

	Experts       int `json:"experts,omitempty"` // routed experts per MoE layer (0: dense)
	ActiveExperts int `json:"active_experts,omitempty"`
	SharedExperts int `json:"shared_experts,omitempty"`
	ExpertFFN     int `json:"expert_ffn,omitempty"`
	DenseLayers   int `json:"dense_layers,omitempty"` // leading layers with a dense FFN (MoE models)
	// ExpertGroups and GroupsPerToken limit a token's experts to
	// GroupsPerToken of ExpertGroups contiguous groups of the routed
	// experts (DeepSeek-V3's n_group and topk_group; 0: no limit).
	ExpertGroups   int `json:"expert_groups,omitempty"`
	GroupsPerToken int `json:"groups_per_token,omitempty"`

	KVLoRA  int `json:"kv_lora_rank,omitempty"`     // MLA: compressed KV latent (0: grouped-query attention)
	QLoRA   int `json:"q_lora_rank,omitempty"`      // MLA: compressed query rank (0: a full query projection)
	RopeDim int `json:"qk_rope_head_dim,omitempty"` // MLA: positional key elements per token

	Source string `json:"source,omitempty"`
}

// expertPrecision is the experts' matmul precision (ExpertPrecision, else
// Precision).
func (m Model) expertPrecision() string {
	if m.ExpertPrecision != "" {
		return m.ExpertPrecision
	}
	return m.Precision
}

// corePrecision is the precision attention's core (QK^T and AV) runs at:
// the KV cache's, which its operands are read in (a 16-bit KV cache runs
// it in bf16 whatever the weights; an 8-bit one in fp8, as TensorRT-LLM's
// FP8 attention kernels do), and no finer than fp8 (no serving engine runs
// attention in fp4).
func (m Model) corePrecision() string {
	if m.KVBytes >= 2 || m.Precision == "bf16" {
		return "bf16"
	}
	return "fp8"
}

// Precisions are the matrix-multiply precisions a model may name.
var Precisions = []string{"bf16", "fp8", "fp4"}

// Validate names the first field that breaks its rule.
func (m Model) Validate() error {
	bad := func(field, rule string, v any) error {
		return fmt.Errorf("%w: model %q: %s = %v: %s", ErrInvalid, m.Name, field, v, rule)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", m.Layers}, {"kv_heads", m.KVHeads}, {"head_dim", m.HeadDim}, {"kv_bytes", m.KVBytes}} {
		// The KV cache's geometry (Geometry) takes these up to
		// topology.MaxModelField.
		if f.v < 1 || f.v > topology.MaxModelField {
			return bad(f.name, fmt.Sprintf("must be an integer in [1, %d] (the KV cache geometry's limit)", topology.MaxModelField), f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden", m.Hidden}, {"heads", m.Heads}, {"vocab", m.Vocab}, {"act_bytes", m.ActBytes}} {
		if f.v < 1 || f.v > 1<<20 {
			return bad(f.name, "must be an integer in [1, 1048576]", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"ffn", m.FFN}, {"experts", m.Experts}, {"active_experts", m.ActiveExperts}, {"shared_experts", m.SharedExperts},
		{"expert_ffn", m.ExpertFFN}, {"dense_layers", m.DenseLayers}, {"expert_groups", m.ExpertGroups}, {"groups_per_token", m.GroupsPerToken},
		{"kv_lora_rank", m.KVLoRA}, {"q_lora_rank", m.QLoRA}, {"qk_rope_head_dim", m.RopeDim}} {
		if f.v < 0 || f.v > 1<<20 {
			return bad(f.name, "must be an integer in [0, 1048576]", f.v)
		}
	}
	// MLA's latent is the geometry's head (Geometry), and every token's
	// KV a block of one token must hold (topology.MaxBlockBytes): a model
	// the geometry would refuse later is refused here, by its fields.
	if latent := (m.KVLoRA + m.RopeDim) / 2; latent > topology.MaxModelField {
		return bad("(kv_lora_rank + qk_rope_head_dim) / 2", fmt.Sprintf("must be at most %d (the KV cache geometry's limit)", topology.MaxModelField), latent)
	}
	if g := m.Geometry(1); float64(g.Layers)*float64(g.KVHeads)*2*float64(g.HeadDim)*float64(g.ElemBytes) > topology.MaxBlockBytes {
		return bad("layers", fmt.Sprintf("x kv_heads x 2 x head_dim x kv_bytes: a token's KV cache is more than the %d bytes (1 TiB) a KV block may hold", int64(topology.MaxBlockBytes)), m.Layers)
	}
	switch {
	case m.Heads%m.KVHeads != 0:
		return bad("heads", fmt.Sprintf("must be a multiple of kv_heads (%d)", m.KVHeads), m.Heads)
	case !finitePositive(m.WeightBytes) || m.WeightBytes > 8:
		return bad("weight_bytes", "must be a number in (0, 8]", m.WeightBytes)
	case m.ExpertWeightBytes != 0 && (!finitePositive(m.ExpertWeightBytes) || m.ExpertWeightBytes > 8):
		return bad("expert_weight_bytes", "must be 0 (as weight_bytes) or a number in (0, 8]", m.ExpertWeightBytes)
	case !slices.Contains(Precisions, m.Precision):
		return bad("precision", "must be one of bf16, fp8, fp4", fmt.Sprintf("%q", m.Precision))
	case m.ExpertPrecision != "" && !slices.Contains(Precisions, m.ExpertPrecision):
		return bad("expert_precision", "must be \"\" (as precision) or one of bf16, fp8, fp4", fmt.Sprintf("%q", m.ExpertPrecision))
	case m.ExpertPrecision != "" && m.Experts == 0:
		return bad("expert_precision", "a dense model has no experts (leave it unset)", fmt.Sprintf("%q", m.ExpertPrecision))
	case m.Experts == 0 && (m.ActiveExperts != 0 || m.SharedExperts != 0 || m.ExpertFFN != 0 || m.DenseLayers != 0 || m.ExpertGroups != 0 || m.GroupsPerToken != 0):
		return bad("experts", "must be set (> 0) when active_experts, shared_experts, expert_ffn, dense_layers, expert_groups or groups_per_token is", m.Experts)
	case m.Experts == 0 && m.FFN == 0:
		return bad("ffn", "a dense model needs ffn > 0", m.FFN)
	case m.Experts > 0 && (m.ActiveExperts < 1 || m.ActiveExperts > m.Experts):
		return bad("active_experts", fmt.Sprintf("must be in [1, experts (%d)]", m.Experts), m.ActiveExperts)
	case m.Experts > 0 && m.ExpertFFN < 1:
		return bad("expert_ffn", "an MoE model needs expert_ffn > 0", m.ExpertFFN)
	case m.ExpertGroups > 0 && m.Experts%m.ExpertGroups != 0:
		return bad("expert_groups", fmt.Sprintf("must divide experts (%d)", m.Experts), m.ExpertGroups)
	case m.ExpertGroups == 0 && m.GroupsPerToken != 0:
		return bad("groups_per_token", "needs expert_groups (leave it unset without groups)", m.GroupsPerToken)
	case m.ExpertGroups > 0 && (m.GroupsPerToken < 1 || m.GroupsPerToken > m.ExpertGroups):
		return bad("groups_per_token", fmt.Sprintf("must be in [1, expert_groups (%d)]", m.ExpertGroups), m.GroupsPerToken)
	case m.ExpertGroups > 0 && m.GroupsPerToken*(m.Experts/m.ExpertGroups) < m.ActiveExperts:
		return bad("groups_per_token", fmt.Sprintf("its groups hold %d experts, fewer than active_experts (%d)", m.GroupsPerToken*(m.Experts/m.ExpertGroups), m.ActiveExperts), m.GroupsPerToken)
	case m.DenseLayers > m.Layers:
		return bad("dense_layers", fmt.Sprintf("must be at most layers (%d)", m.Layers), m.DenseLayers)
	case m.DenseLayers > 0 && m.FFN == 0:
		return bad("ffn", "dense_layers > 0 needs ffn > 0", m.FFN)
	case m.KVLoRA == 0 && (m.QLoRA != 0 || m.RopeDim != 0):
		return bad("kv_lora_rank", "must be set (> 0, latent attention) when q_lora_rank or qk_rope_head_dim is", m.KVLoRA)
	case m.KVLoRA > 0 && (m.KVLoRA+m.RopeDim)%2 != 0:
		return bad("qk_rope_head_dim", fmt.Sprintf("kv_lora_rank + qk_rope_head_dim must be even (the runtime moves the latent as two halves; kv_lora_rank is %d)", m.KVLoRA), m.RopeDim)
	}
	return nil
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// MoE reports whether the model has routed experts.
func (m Model) MoE() bool { return m.Experts > 0 }

// Routing is how the model's tokens pick their routed experts (zero for
// a dense model): what the runtime routes by and the cost model prices.
func (m Model) Routing() topology.Routing {
	return topology.Routing{Experts: m.Experts, TopK: m.ActiveExperts, Groups: m.ExpertGroups, GroupsPerToken: m.GroupsPerToken}
}

// moeLayers is the number of layers with experts.
func (m Model) moeLayers() int {
	if !m.MoE() {
		return 0
	}
	return m.Layers - m.DenseLayers
}

func (m Model) expertBytes() float64 {
	if m.ExpertWeightBytes > 0 {
		return m.ExpertWeightBytes
	}
	return m.WeightBytes
}

// MLA reports whether attention is multi-head latent attention.
func (m Model) MLA() bool { return m.KVLoRA > 0 }

// AttnParams is the parameters of one layer's attention: Q and O
// (Hidden x Heads*HeadDim each), K and V (Hidden x KVHeads*HeadDim each).
// Under MLA: the query's down and up projections (Hidden x QLoRA, QLoRA x
// Heads*(HeadDim+RopeDim); one Hidden x Heads*(HeadDim+RopeDim) without
// QLoRA), the KV down projection (Hidden x (KVLoRA+RopeDim)), its up
// projection to keys and values (KVLoRA x Heads*2*HeadDim) and O.
func (m Model) AttnParams() float64 {
	h := float64(m.Hidden)
	if !m.MLA() {
		return 2*h*float64(m.Heads*m.HeadDim) + 2*h*float64(m.KVHeads*m.HeadDim)
	}
	qk := float64(m.Heads * (m.HeadDim + m.RopeDim))
	q := h * qk
	if m.QLoRA > 0 {
		q = h*float64(m.QLoRA) + float64(m.QLoRA)*qk
	}
	kv := h*float64(m.KVLoRA+m.RopeDim) + float64(m.KVLoRA)*float64(m.Heads*2*m.HeadDim)
	return q + kv + float64(m.Heads*m.HeadDim)*h
}

// attnReplicated is the part of AttnParams every TP rank holds whole:
// under MLA the query and KV down projections (Hidden x QLoRA and Hidden x
// (KVLoRA+RopeDim)), whose outputs, the latents, every head reads, so
// engines replicate them instead of splitting them (vLLM's
// ReplicatedLinear q_a_proj and kv_a_proj_with_mqa; TensorRT-LLM's fused_a
// without tensor parallelism). 0 without MLA.
func (m Model) attnReplicated() float64 {
	if !m.MLA() {
		return 0
	}
	return float64(m.Hidden) * float64(m.QLoRA+m.KVLoRA+m.RopeDim)
}

// attnPerRank is one rank's share of AttnParams when attention is split
// split ways: the replicated part whole, the rest over split.
func (m Model) attnPerRank(split float64) float64 {
	r := m.attnReplicated()
	return (m.AttnParams()-r)/split + r
}

// kvElemsPerTokenLayer is the KV elements one token adds to one layer's
// cache over every rank's share: K and V of KVHeads heads, or the MLA
// latent and positional key.
func (m Model) kvElemsPerTokenLayer() float64 {
	if m.MLA() {
		return float64(m.KVLoRA + m.RopeDim)
	}
	return 2 * float64(m.KVHeads*m.HeadDim)
}

// qkDim is the elements a head's query and key share (HeadDim, plus
// RopeDim under MLA).
func (m Model) qkDim() float64 { return float64(m.HeadDim + m.RopeDim) }

// decodeCoreFLOPs is the attention FLOPs of one new token per token of
// context in one layer: QK^T and AV over every head (4*Heads*HeadDim);
// under MLA with the up projections absorbed into the query and output, as
// serving engines decode it: scores over the latent and positional key,
// values over the latent.
func (m Model) decodeCoreFLOPs() float64 {
	if m.MLA() {
		return 2 * float64(m.Heads) * float64(2*m.KVLoRA+m.RopeDim)
	}
	return 4 * float64(m.Heads*m.HeadDim)
}

// denseFFNParams is one dense gated FFN: 3 x Hidden x FFN.
func (m Model) denseFFNParams() float64 { return 3 * float64(m.Hidden) * float64(m.FFN) }

// expertParams is one expert: 3 x Hidden x ExpertFFN.
func (m Model) expertParams() float64 { return 3 * float64(m.Hidden) * float64(m.ExpertFFN) }

// routerParams is one MoE layer's router: Hidden x Experts.
func (m Model) routerParams() float64 { return float64(m.Hidden) * float64(m.Experts) }

// Params is every parameter: layers, the input embedding and the LM head
// (untied, Vocab x Hidden each).
func (m Model) Params() float64 {
	p := float64(m.Layers)*m.AttnParams() + float64(m.Layers-m.moeLayers())*m.denseFFNParams()
	p += float64(m.moeLayers()) * (m.routerParams() + float64(m.Experts+m.SharedExperts)*m.expertParams())
	return p + 2*float64(m.Vocab)*float64(m.Hidden)
}

// ActiveParams is the parameters one token's forward pass multiplies by:
// every layer's attention, dense FFN or router plus its active and shared
// experts, and the LM head (the embedding is a lookup).
func (m Model) ActiveParams() float64 {
	p := float64(m.Layers)*m.AttnParams() + float64(m.Layers-m.moeLayers())*m.denseFFNParams()
	p += float64(m.moeLayers()) * (m.routerParams() + float64(m.ActiveExperts+m.SharedExperts)*m.expertParams())
	return p + float64(m.Vocab)*float64(m.Hidden)
}

// WeightBytesTotal is the bytes of every weight.
func (m Model) WeightBytesTotal() float64 {
	experts := float64(m.moeLayers()) * float64(m.Experts+m.SharedExperts) * m.expertParams()
	return (m.Params()-experts)*m.WeightBytes + experts*m.expertBytes()
}

// KVBytesPerToken is the KV cache of one token over every layer: K and V,
// KVHeads x HeadDim elements each (under MLA the latent and positional key).
func (m Model) KVBytesPerToken() float64 {
	return float64(m.Layers) * m.kvElemsPerTokenLayer() * float64(m.KVBytes)
}

// Geometry is the KV-cache geometry the runtime moves for this model, with
// tokensPerBlock tokens per block. Under MLA the latent and positional key
// are one head of (KVLoRA+RopeDim)/2 elements, its K and V halves: the
// bytes a token moves are exact, and a TP layout duplicates the head on
// every rank, as MLA's cache is.
func (m Model) Geometry(tokensPerBlock int) topology.Model {
	if m.MLA() {
		return topology.Model{Layers: m.Layers, KVHeads: 1, HeadDim: (m.KVLoRA + m.RopeDim) / 2, TokensPerBlock: tokensPerBlock, ElemBytes: m.KVBytes}
	}
	return topology.Model{Layers: m.Layers, KVHeads: m.KVHeads, HeadDim: m.HeadDim, TokensPerBlock: tokensPerBlock, ElemBytes: m.KVBytes}
}
