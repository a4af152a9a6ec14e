package costmodel

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/topology"
)

// computeHW is every hardware preset with compute figures.
func computeHW(t *testing.T) []Hardware {
	t.Helper()
	var out []Hardware
	for _, n := range sortedKeys(Hardwares) {
		if h := Hardwares[n]; h.Compute() {
			out = append(out, h)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// tpLayouts is tp=1, 2, 4, 8 where m's weights fit and its heads split
// (none on hardware without a peak for m's precision).
func tpLayouts(p Placement) []topology.Layout {
	var out []topology.Layout
	// A model whose precision (or its experts') the hardware has no peak
	// for is refused by Placement.Validate: its compute time is infinite
	// (deepseek-r1-fp4's experts on Hopper passed these tests as
	// overflowed times that matched each other).
	if p.HW.Peak(p.Model.Precision) == 0 || (p.Model.MoE() && p.HW.Peak(p.Model.expertPrecision()) == 0) {
		return nil
	}
	for tp := 1; tp <= 8; tp *= 2 {
		l := topology.Layout{TP: tp, PP: 1, CP: 1, DP: 1}
		if l.ValidateFor(p.Model.Geometry(16)) == nil && p.Fits(l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// A single request's prefill is, for a request long enough to be
// compute-bound, its FLOPs over TP x peak x efficiency plus two TP
// allreduces of its activations per layer, to the nanosecond. The FLOPs are
// written out here independently of the model's code: 2 per active
// parameter per token, less the LM head, which runs once for the last
// token; causal attention Heads*(QK dim + V dim)*n*(n+1) per layer (the
// QK dim is HeadDim, plus the positional key's RopeDim under MLA). Under
// MLA the query and KV down projections (Hidden x (QLoRA + KVLoRA +
// RopeDim) a layer) run whole on every TP rank: engines replicate them.
func TestPrefillClosedForm(t *testing.T) {
	const n = 8192
	for _, hw := range computeHW(t) {
		for _, name := range ModelNames() {
			m := Models[name]
			p := Placement{Model: m, HW: hw}
			ls := tpLayouts(p)
			if len(ls) == 0 {
				continue
			}
			for _, l := range ls {
				p.Ctx, p.Gen = l, l
				lm := float64(m.Vocab) * float64(m.Hidden)
				qk, v := m.HeadDim+m.RopeDim, m.HeadDim
				flops := 2*(m.ActiveParams()-lm)*n + 2*lm + float64(m.Layers*m.Heads*(qk+v))*n*(n+1)
				var whole float64 // FLOPs every TP rank runs in full
				if m.KVLoRA > 0 {
					whole = 2 * float64(m.Layers*m.Hidden*(m.QLoRA+m.KVLoRA+m.RopeDim)) * n
				}
				// The experts' FLOPs (routed active and shared, over
				// TP) run at the expert precision's peak.
				var xflops float64
				if m.MoE() {
					moeLayers := float64(m.Layers - m.DenseLayers)
					xflops = 2 * moeLayers * float64(m.ActiveExperts+m.SharedExperts) * 3 * float64(m.Hidden*m.ExpertFFN) * n
				}
				xp := m.ExpertPrecision
				if xp == "" {
					xp = m.Precision
				}
				// Attention's core runs at the KV cache's precision:
				// bf16 for a 16-bit cache, else fp8 (bf16 models: bf16).
				coreFLOPs := float64(m.Layers*m.Heads*(qk+v)) * n * (n + 1)
				cp := "fp8"
				if m.KVBytes >= 2 || m.Precision == "bf16" {
					cp = "bf16"
				}
				compute := ((flops-whole-xflops-coreFLOPs)/float64(l.TP)+whole)/(hw.Peak(m.Precision)*hw.ComputeEffFor(m.Precision)) +
					xflops/float64(l.TP)/(hw.Peak(xp)*hw.ComputeEffFor(xp)) +
					coreFLOPs/float64(l.TP)/(hw.Peak(cp)*hw.ComputeEffFor(cp))
				members := make([]int, l.TP)
				for i := range members {
					members[i] = i
				}
				ar := hw.Fabric.Collective(flight.KindAllreduce, members, n*m.Hidden*m.ActBytes)
				want := time.Duration(math.Round(compute*1e9)) + time.Duration(2*m.Layers)*ar + hw.StepOverhead
				// The precondition: this request is compute-bound.
				w := p.side(l, 0).prefillWork(0, []Seq{{Tokens: n}})
				require.Greater(t, w.allFLOPs()/(hw.Peak(m.Precision)*hw.ComputeEffFor(m.Precision)), memTime(hw, w), "%s %s %s", hw.Name, name, l)
				got := p.Prefill([]Seq{{Tokens: n}})
				assert.InDelta(t, want, got, 1, "%s on %s, %s: prefill of %d tokens", name, hw.Name, l, n)
			}
		}
	}
}

// Doubling TP never more than halves a prefill or a decode step (the work
// at most halves, the collectives only add), for any batch.
func TestTPNeverMoreThanHalves(t *testing.T) {
	batches := [][]Seq{{{Tokens: 1}}, {{Tokens: 128}}, {{Tokens: 4096}}, {{Tokens: 32768}},
		{{Tokens: 100}, {Tokens: 2000}, {Tokens: 7}}, make([]Seq, 64)}
	for i := range batches[5] {
		batches[5][i] = Seq{Tokens: 512 + 37*i}
	}
	for _, hw := range computeHW(t) {
		for _, name := range ModelNames() {
			p := Placement{Model: Models[name], HW: hw}
			ls := tpLayouts(p)
			for i := 1; i < len(ls); i++ {
				one, two := p, p
				one.Ctx, one.Gen = ls[i-1], ls[i-1]
				two.Ctx, two.Gen = ls[i], ls[i]
				for _, b := range batches {
					assert.GreaterOrEqual(t, 2*two.Prefill(b), one.Prefill(b), "%s on %s: prefill %s vs %s, %d requests", name, hw.Name, ls[i], ls[i-1], len(b))
					assert.GreaterOrEqual(t, 2*two.Decode(b), one.Decode(b), "%s on %s: decode %s vs %s, %d requests", name, hw.Name, ls[i], ls[i-1], len(b))
				}
			}
		}
	}
}

// At batch 1 a decode step reads every weight of its rank (the active
// experts of an MoE) and its KV for a handful of FLOPs per byte: memory
// time exceeds compute time on every preset, for any layout that holds the
// model and contexts up to 32k tokens.
func TestDecodeBatch1MemoryBound(t *testing.T) {
	for _, hw := range computeHW(t) {
		for _, name := range ModelNames() {
			p := Placement{Model: Models[name], HW: hw}
			for _, l := range tpLayouts(p) {
				for _, ctx := range []int{1, 1024, 32768} {
					w := p.side(l, 0).decodeWork(0, []Seq{{Tokens: ctx}})
					c := w.allFLOPs() / (hw.Peak(p.Model.Precision) * hw.ComputeEffFor(p.Model.Precision))
					mem := memTime(hw, w)
					assert.Greater(t, mem, c, "%s on %s %s, context %d: compute %.3g s, memory %.3g s", name, hw.Name, l, ctx, c, mem)
				}
			}
		}
	}
}

// A batch-1 decode step of a dense model on one GPU is, exactly, its
// weights (all but the input embedding) over the achieved HBM bandwidth
// plus the KV of its context over the KV cache's.
func TestDecodeClosedForm(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	m := Models["llama-3-8b"]
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	p := Placement{Model: m, HW: hw, Ctx: l, Gen: l}
	const ctx = 2000
	mem := memTime(hw, work{weights: (m.Params() - float64(m.Vocab*m.Hidden)) * m.WeightBytes, kv: ctx * m.KVBytesPerToken()})
	want := time.Duration(math.Round(mem*1e9)) + hw.StepOverhead
	assert.InDelta(t, want, p.Decode([]Seq{{Tokens: ctx}}), 1)

	// Over TP=2 each rank reads half the weights and half the KV heads of
	// a long context, plus two allreduces of one token's activations per
	// layer.
	l2 := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	p2 := Placement{Model: m, HW: hw, Ctx: l2, Gen: l2}
	const long = 32768
	mem = memTime(hw, work{weights: (m.Params() - float64(m.Vocab*m.Hidden)) * m.WeightBytes / 2, kv: long * m.KVBytesPerToken() / 2})
	ar := hw.Fabric.Collective(flight.KindAllreduce, []int{0, 1}, m.Hidden*m.ActBytes)
	// The GEN ranks follow the CTX ones: world ranks 2 and 3, one node.
	want = time.Duration(math.Round(mem*1e9)) + time.Duration(2*m.Layers)*ar + hw.StepOverhead
	assert.InDelta(t, want, p2.Decode([]Seq{{Tokens: long}}), 1)
	// A hardware with no host cost is the roofline alone.
	bare := hw
	bare.StepOverhead = 0
	p2.HW = bare
	assert.InDelta(t, want-hw.StepOverhead, p2.Decode([]Seq{{Tokens: long}}), 1)
}

// A large decode batch over long contexts (Llama-3-70B FP8 on two H100s,
// 256 requests of 4,096 tokens) is two kernels on either side of their
// rooflines, one after the other: the GEMMs compute (half of 2 FLOPs a
// parameter a request, past the weights' read), attention streams its KV
// (half the KV heads a rank, past its QK^T and AV). Overlapped as one
// roofline, the step would come out 14% short.
func TestDecodeKernelsApart(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	m := fp8(Models["llama-3-70b"])
	l := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	p := Placement{Model: m, HW: hw, Ctx: l, Gen: l}
	const batch, ctx = 256, 4096
	lm := float64(m.Vocab) * float64(m.Hidden)
	peak := hw.Peak("fp8") * DefaultComputeEff
	gemm := batch * 2 * (m.ActiveParams() - lm + lm) / 2 / peak // every layer's and the LM head's, a rank's half
	stream := (m.Params() - lm) * m.WeightBytes / 2 / (hw.HBMBandwidth * DefaultMemoryEff)
	core := batch * ctx * 4 * float64(m.Layers*m.Heads*m.HeadDim) / 2 / peak
	kv := batch * ctx * m.KVBytesPerToken() / 2 / (hw.HBMBandwidth * DefaultKVEff)
	require.Greater(t, gemm, stream, "the precondition: the GEMMs compute")
	require.Greater(t, kv, core, "the precondition: attention streams its KV")
	ar := hw.Fabric.Collective(flight.KindAllreduce, []int{2, 3}, batch*m.Hidden*m.ActBytes)
	want := time.Duration(math.Round((gemm+kv)*1e9)) + time.Duration(2*m.Layers)*ar + hw.StepOverhead
	batchOf := make([]Seq, batch)
	for i := range batchOf {
		batchOf[i] = Seq{Tokens: ctx}
	}
	assert.InDelta(t, want, p.Decode(batchOf), 2)
	overlapped := time.Duration(math.Round(math.Max(gemm+core, stream+kv)*1e9)) + time.Duration(2*m.Layers)*ar + hw.StepOverhead
	assert.Less(t, float64(overlapped), 0.9*float64(want), "the kernels apart cost a tenth more at least")
}

// An MoE decode step reads only the experts its batch touches: one token
// reads the active ones, a large batch nearly all.
func TestDecodeMoEReadsTouchedExperts(t *testing.T) {
	m := Models["gpt-oss-120b"]
	hw := Hardwares["h100-nvlink-ib400"]
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	s := Placement{Model: m, HW: hw, Ctx: l, Gen: l}.side(l, 0)
	bytes := func(tokens float64) float64 { r, x := s.ffnBytes(true, tokens); return r + x }
	one := bytes(1)
	assert.InDelta(t, m.routerParams()*m.WeightBytes+float64(m.ActiveExperts)*m.expertParams()*m.expertBytes(), one, 1)
	all := m.routerParams()*m.WeightBytes + float64(m.Experts)*m.expertParams()*m.expertBytes()
	assert.InDelta(t, all, bytes(4096), all*1e-6)
	assert.Less(t, bytes(8), bytes(64))
}

// Pipelining: a single request gains nothing from PP (its stages run one
// after another, plus the activation sends), a batch of PP requests gains
// the pipeline's overlap: (2 PP - 1) / PP^2 of the unpipelined time for
// equal requests, plus the sends.
func TestPrefillPipeline(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	m := Models["llama-3-8b"]
	one := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	pp2 := topology.Layout{TP: 1, PP: 2, CP: 1, DP: 1}
	p1 := Placement{Model: m, HW: hw, Ctx: one, Gen: one}
	p2 := Placement{Model: m, HW: hw, Ctx: pp2, Gen: pp2}
	const n = 4096
	send := hw.Fabric.Intra.Time(n * m.Hidden * m.ActBytes)
	single := p1.Prefill([]Seq{{Tokens: n}})
	// The LM head sits on the last stage only: the two stages differ by it.
	assert.InDelta(t, single+send, p2.Prefill([]Seq{{Tokens: n}}), 2)
	pair := []Seq{{Tokens: n}, {Tokens: n}}
	s := p2.side(pp2, 0)
	t0, t1 := s.prefillStage(0, pair[:1]), s.prefillStage(1, pair[:1])
	// Stage 0 runs both, then stage 1 runs the second after its send.
	want := max(t0+t0+send, t0+send+t1) + t1 + hw.StepOverhead
	assert.Equal(t, want, p2.Prefill(pair))
	assert.Less(t, p2.Prefill(pair), p1.Prefill(pair), "two requests pipeline over two stages")
}

// memTime is w's memory time on hw at the default efficiencies: weights
// at DefaultMemoryEff, KV cache at DefaultKVEff.
func memTime(hw Hardware, w work) float64 {
	return w.weights/(hw.HBMBandwidth*hw.MemoryEffOrDefault()) + w.kv/(hw.HBMBandwidth*hw.KVEffOrDefault())
}

// A prompt prefilled in chunks does the same work as whole: its chunks'
// FLOPs add up to the whole prompt's, to the FLOP (causal attention
// n*(2p+n+1) a chunk of n after p, which sums to N*(N+1)), less the LM head
// of every chunk but the last; its KV is written once and each chunk reads
// what earlier chunks wrote. So the chunks take longer than the whole
// (each reads the weights again, and the earlier KV), and a chunk after
// others costs more than the same tokens as a prompt of their own.
func TestPrefillChunksAddUp(t *testing.T) {
	for _, name := range []string{"llama-3-8b", "llama-3-70b", "deepseek-r1-fp4"} {
		p := Placement{Model: Models[name], HW: Hardwares["h100-nvlink-ib400"]}
		if name == "deepseek-r1-fp4" {
			p.HW = Hardwares["gb200-nvl72"]
		}
		for _, l := range []topology.Layout{{TP: 8, PP: 1, CP: 1, DP: 1}, {TP: 4, PP: 2, CP: 1, DP: 1}} {
			if p.Fits(l) != nil {
				continue
			}
			s := p.side(l, 0)
			last := l.PP - 1
			whole := s.prefillWork(last, []Seq{{Tokens: 2500}})
			var sum work
			for _, c := range []Seq{{Tokens: 1000, Partial: true}, {Tokens: 1000, Past: 1000, Partial: true}, {Tokens: 500, Past: 2000}} {
				sum.add(s.prefillWork(last, []Seq{c}))
			}
			assert.InDelta(t, whole.allFLOPs(), sum.allFLOPs(), whole.allFLOPs()*1e-12, "%s %s: FLOPs", name, l)
			lm := s.lmHead(1)
			// (An MoE reads the experts its tokens touch, fewer for fewer
			// tokens; at 500 tokens nearly all: within a millionth.)
			assert.InEpsilon(t, whole.weights+2*(whole.weights-lm.weights), sum.weights, 1e-6, "%s %s: the weights read a chunk (the LM head's once)", name, l)
			kvTok := float64(s.layersOn(last)) * s.kvBytesPerTokenLayer()
			assert.InDelta(t, whole.kv+(1000+2000)*kvTok, sum.kv, whole.kv*1e-12, "%s %s: the KV written once, the earlier read", name, l)

			chunked := p.side(l, 0).prefill([]Seq{{Tokens: 1000, Partial: true}}) + p.side(l, 0).prefill([]Seq{{Tokens: 1000, Past: 1000, Partial: true}}) +
				p.side(l, 0).prefill([]Seq{{Tokens: 500, Past: 2000}})
			assert.Greater(t, chunked, p.side(l, 0).prefill([]Seq{{Tokens: 2500}}), "%s %s", name, l)
			assert.Greater(t, p.side(l, 0).prefill([]Seq{{Tokens: 500, Past: 2000}}), p.side(l, 0).prefill([]Seq{{Tokens: 500}}), "%s %s", name, l)
		}
	}
}

// allFLOPs is every FLOP of w, at whatever precision.
func (w work) allFLOPs() float64 { return w.flops + w.xflops + w.cflops }

// Attention's core runs at the KV cache's precision where the hardware
// has a peak for it, else at the model's: DeepSeek-R1 (FP8, BF16 KV) on a
// hardware file that lists fp8 alone prefills exactly as on one whose
// bf16 peak is its fp8 peak, and slower on one with a real bf16 peak.
func TestAttentionCorePrecisionFallsBack(t *testing.T) {
	m := Models["deepseek-r1"]
	h200 := Hardwares["h200-nvlink-ib400"]
	fp8Only, same := h200, h200
	fp8Only.PeakFLOPs = map[string]float64{"fp8": h200.Peak("fp8")}
	same.PeakFLOPs = map[string]float64{"fp8": h200.Peak("fp8"), "bf16": h200.Peak("fp8")}
	l := topology.Layout{TP: 8, PP: 1, CP: 1, DP: 1}
	prefill := func(hw Hardware) time.Duration {
		require.NoError(t, hw.Validate())
		return Placement{Model: m, HW: hw, Ctx: l, Gen: l}.Prefill([]Seq{{Tokens: 8192}})
	}
	got := prefill(fp8Only)
	assert.Equal(t, prefill(same), got, "fp8 alone: the core at fp8")
	assert.Greater(t, prefill(h200), got, "a bf16 peak half fp8's: the BF16 KV cache's core at bf16")
}

// TestSecondsSaturates: a time past int64's nanoseconds is the longest
// Duration, not the undefined value a float-to-int conversion gives (a
// step of 1e300 s came out as 0, a throughput of millions of tokens a
// second).
func TestSecondsSaturates(t *testing.T) {
	assert.Equal(t, 1500*time.Millisecond, seconds(1.5))
	assert.Equal(t, time.Duration(math.MaxInt64), seconds(1e300))
	assert.Equal(t, time.Duration(math.MaxInt64), seconds(math.Inf(1)))
	assert.Equal(t, time.Duration(math.MaxInt64), seconds(9.3e9), "just past int64's 292 years")
}

// Hardware at every floor Validate takes (1e9 FLOP/s and bytes/s, 1%
// efficiency) and a 405B prompt of 120,000 tokens: a prefill past what a
// Duration holds is never (the longest Duration), at PP 1 with a step
// overhead and at PP 2 (its stages summed), where it wrapped to a negative
// step and to a 2 ms one; and so is the steady-state step of the offline
// throughput. The sums and multiples saturate (add, times).
func TestStepTimesSaturate(t *testing.T) {
	hw := Hardware{Name: "slow", PeakFLOPs: map[string]float64{"bf16": 1e9, "fp8": 1e9}, HBMBandwidth: 1e9, HBMCapacity: 1e15,
		ComputeEff: 0.01, MemoryEff: 0.01, KVEff: 0.01, StepOverhead: time.Millisecond}
	require.NoError(t, hw.Validate())
	for _, l := range []topology.Layout{{TP: 1, PP: 1, CP: 1, DP: 1}, {TP: 1, PP: 2, CP: 1, DP: 1}} {
		p := Placement{Model: Models["llama-3.1-405b"], HW: hw, Ctx: l, Gen: l}
		require.NoError(t, p.Validate())
		assert.Equal(t, never, p.Prefill([]Seq{{Tokens: 120000}}), "%s: a prefill of 120,000 tokens", l)
		s := p.side(l, 0)
		assert.Equal(t, never, p.step(s, false, mix{prefills: 1, in: 120000, decodes: 1, ctx: 120000, chunks: 1}), "%s: an offline step", l)
	}
	// A benchmark's whole time (its steps' sum) too: it wrapped to
	// -1121518973 s.
	l := topology.Layout{TP: 8, PP: 1, CP: 1, DP: 1}
	p := Placement{Model: Models["llama-3.1-405b"], HW: hw, Ctx: l, Gen: l}
	r, err := p.Benchmark(l, Benchmark{Requests: 100, In: 2048, Out: 8192})
	require.NoError(t, err)
	assert.Equal(t, never, r.Duration, "100 requests of 2048 in / 8192 out at the floors")
	assert.Equal(t, never, add(never, time.Millisecond))
	assert.Equal(t, never, add(never-1, 2))
	assert.Equal(t, never-1, add(never-2, 1))
	assert.Equal(t, never, times(2, never/2+1))
	assert.Equal(t, 6*time.Second, times(3, 2*time.Second))
	assert.Equal(t, time.Duration(0), times(0, never))
}
