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

// A steady step of Llama-3-8B FP8 on one H100 at 128 in / 128 out, held at
// max_batch (2048 requests: 16 prompts and 2032 decodes a step), is by
// hand the roofline of the step's FLOPs, its weights read once and its KV
// moved, plus the host cost; its throughput is 2048 tokens a step.
func TestOfflineClosedForm(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	m := fp8(Models["llama-3-8b"])
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	st, err := Placement{Model: m, HW: hw}.Offline(l, Scheduler{}, 128, 128)
	require.NoError(t, err)
	assert.Equal(t, "max_batch", st.Bound)
	assert.InDelta(t, 2048, st.Batch, 0)
	assert.InDelta(t, 16, st.Prefills, 1e-12)

	lm := float64(m.Vocab) * float64(m.Hidden)
	dense := m.ActiveParams() - lm // every layer's weights, one token's FLOPs/2
	attn := 2 * float64(m.Layers*m.Heads*m.HeadDim)
	const prompts, decodes, ctx = 16.0, 2032.0, 128 + 64
	gemm := prompts*(2*dense*128+2*lm) + decodes*(2*dense+2*lm)
	weights := (m.Params() - lm) * m.WeightBytes // the embedding is a lookup
	peak, kvBW := hw.Peak("fp8")*DefaultComputeEff, hw.HBMBandwidth*DefaultKVEff
	// Three kernels one after the other, each its own roofline: the
	// GEMMs, context attention (the prompts), generation attention.
	sec := math.Max(gemm/peak, weights/(hw.HBMBandwidth*DefaultMemoryEff)) +
		math.Max(prompts*attn*128*129/peak, prompts*128*m.KVBytesPerToken()/kvBW) +
		math.Max(decodes*2*attn*ctx/peak, decodes*ctx*m.KVBytesPerToken()/kvBW)
	want := time.Duration(math.Round(sec*1e9)) + hw.StepOverhead
	assert.InDelta(t, want, st.Step, 2, "step")
	assert.InDelta(t, 2048/want.Seconds(), st.Throughput, 1e-6*st.Throughput)
}

// What holds the batch: the KV cache for long requests, the token budget
// for long prompts, max_batch for short ones; and a smaller limit of any
// of them lowers it.
func TestOfflineBounds(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	p := Placement{Model: fp8(Models["llama-3-70b"]), HW: hw}
	tp2 := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	for _, c := range []struct {
		in, out int
		sch     Scheduler
		bound   string
		batch   float64
	}{
		// Each rank holds half the weights (embedding and LM head too) and
		// half the KV heads of every layer.
		{1000, 1000, Scheduler{}, "kv", math.Floor((0.9*80e9 - p.Model.Params()/2) / (80 * 2 * 4 * 128) / 2000)},
		{1000, 1000, Scheduler{MaxBatch: 64}, "max_batch", 64},
		{2048, 128, Scheduler{MaxTokens: 3000}, "max_tokens", 3000 * 128 / float64(2048+127)},
		{128, 16, Scheduler{}, "max_tokens", 8192 * 16 / float64(128+15)},
	} {
		st, err := p.Offline(tp2, c.sch, c.in, c.out)
		require.NoError(t, err)
		assert.Equal(t, c.bound, st.Bound, "%d/%d %s", c.in, c.out, c.sch)
		assert.InDelta(t, c.batch, st.Batch, 1e-9, "%d/%d %s", c.in, c.out, c.sch)
		// A step's tokens never pass the budget.
		_, budget := c.sch.Limits()
		assert.LessOrEqual(t, st.Prefills*float64(c.in)+st.Batch-st.Prefills, float64(budget)+1e-9)
	}
}

// DP replicas multiply the throughput; PP stages pipeline micro-batches
// (a step is PP rounds of a stage), so a compute-bound step on PP 2 takes
// half the time of one GPU's; the weights are read once a step, not once
// a request.
func TestOfflineLayouts(t *testing.T) {
	hw := Hardwares["h200-nvlink-ib400"]
	p := Placement{Model: fp8(Models["llama-3-8b"]), HW: hw}
	one := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	a, err := p.Offline(one, Scheduler{}, 1000, 1000)
	require.NoError(t, err)
	dp2 := one
	dp2.DP = 2
	b, err := p.Offline(dp2, Scheduler{}, 1000, 1000)
	require.NoError(t, err)
	assert.InDelta(t, 2*a.Throughput, b.Throughput, 1e-9*b.Throughput, "DP 2")

	// A prefill-bound step (2048 in / 128 out, held by the token budget)
	// is compute: two stages of half the layers each, running two
	// micro-batches of half the batch, take half one GPU's step (plus the
	// activations' sends).
	pp2 := one
	pp2.PP = 2
	c, err := p.Offline(pp2, Scheduler{}, 2048, 128)
	require.NoError(t, err)
	d, err := p.Offline(one, Scheduler{}, 2048, 128)
	require.NoError(t, err)
	require.Equal(t, "max_tokens", d.Bound)
	assert.InDelta(t, d.Batch, c.Batch, 1e-9)
	host := hw.StepOverhead
	assert.InEpsilon(t, (d.Step-host).Seconds()/2, (c.Step - host).Seconds(), 0.02, "PP 2: %v vs one GPU's %v", c.Step, d.Step)

	// Uneven stages: a vocabulary of a million tokens puts a heavy LM
	// head on the last of 4 stages, which then sets the pace: a step is 4
	// rounds of it, not one micro-batch's trip through all 4.
	wide := p
	wide.Model.Vocab = 1 << 20
	pp4 := one
	pp4.PP = 4
	e, err := wide.Offline(pp4, Scheduler{MaxBatch: 256}, 128, 2048)
	require.NoError(t, err)
	s := wide.side(pp4, 0)
	x := mix{prefills: e.Prefills / 4, in: 128, decodes: (e.Batch - e.Prefills) / 4, ctx: 128 + 1024}
	first, last := s.mixedStage(0, x), s.mixedStage(3, x)
	require.Greater(t, last, first*3/2, "the LM head's stage is the heaviest")
	assert.Equal(t, 4*last+hw.StepOverhead, e.Step, "PP 4 with a heavy last stage")
	// Reading the weights once a step: a step of 2048 requests costs far
	// less than 2048 single-request steps.
	single, err := p.Offline(one, Scheduler{MaxBatch: 1}, 128, 128)
	require.NoError(t, err)
	full, err := p.Offline(one, Scheduler{}, 128, 128)
	require.NoError(t, err)
	assert.Greater(t, full.Throughput, 100*single.Throughput, "batching 2048 requests")
}

// Bad input: one line naming the field and the rule.
func TestOfflineErrors(t *testing.T) {
	p := Placement{Model: fp8(Models["llama-3-70b"]), HW: Hardwares["h100-nvlink-ib400"]}
	tp2 := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	for _, c := range []struct {
		l       topology.Layout
		sch     Scheduler
		in, out int
		want    string
	}{
		{tp2, Scheduler{}, 0, 10, "in = 0, out = 10: both must be at least 1"},
		{topology.Layout{TP: 2, PP: 1, CP: 2, DP: 1}, Scheduler{}, 100, 10, "cp = 2: throughput is modelled for cp = 1"},
		{tp2, Scheduler{}, 20000, 10, "in = 20000: a prompt longer than max_tokens (8192) needs chunked prefill"},
		{tp2, Scheduler{Chunked: true}, 1 << 22, 10, "holds the KV of no request of 4194314 tokens"},
		{tp2, Scheduler{Chunked: true, MaxTokens: 100}, 5000, 1, "a step's budget holds less than one request"},
		{topology.Layout{TP: 3, PP: 1, CP: 1, DP: 1}, Scheduler{}, 100, 10, "8 KV heads do not split evenly over tp=3"},
		{topology.Layout{TP: 2, PP: 81, CP: 1, DP: 1}, Scheduler{}, 100, 10, "pp = 81: at most the model's 80 layers"},
	} {
		_, err := p.Offline(c.l, c.sch, c.in, c.out)
		require.Error(t, err, c.want)
		assert.Contains(t, err.Error(), c.want)
		assert.NotContains(t, err.Error(), "\n")
	}
	bf16 := Placement{Model: Models["llama-3-70b"], HW: p.HW}
	_, err := bf16.Offline(topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}, Scheduler{}, 100, 10)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exceed 90% of the 80 GB of HBM")
}

// KV-bound (Llama-3-70B FP8 on two H100s at 2048 in / 2048 out): the step
// is, by hand, three kernels, each on the other side of its roofline from
// the one before: the GEMMs computing (half the FLOPs a rank, its batch
// past the weights' ridge), context attention computing (a prompt's
// causal QK^T and AV), generation attention streaming the KV its decodes
// read (half the KV heads a rank) at the KV cache's bandwidth; then two
// allreduces a layer of the step's tokens and the host cost.
func TestOfflineKVBoundClosedForm(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	m := fp8(Models["llama-3-70b"])
	tp2 := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	st, err := Placement{Model: m, HW: hw}.Offline(tp2, Scheduler{}, 2048, 2048)
	require.NoError(t, err)
	require.Equal(t, "kv", st.Bound)
	kvToken := float64(m.Layers * 2 * 4 * m.HeadDim) // one token's KV on a rank (FP8)
	batch := math.Floor((0.9*hw.HBMCapacity - m.Params()/2) / kvToken / 4096)
	assert.InDelta(t, batch, st.Batch, 0)
	prompts, decodes := batch/2048, batch-batch/2048
	lm := float64(m.Vocab) * float64(m.Hidden)
	weights := (m.Params() - lm) / 2 // the embedding is a lookup
	dense := m.ActiveParams() - lm
	attn := 2 * float64(m.Layers*m.Heads*m.HeadDim)
	peak, kvBW := hw.Peak("fp8")*DefaultComputeEff, hw.HBMBandwidth*DefaultKVEff
	gemm, stream := (prompts*(2*dense*2048+2*lm)+decodes*(2*dense+2*lm))/2/peak, weights/(hw.HBMBandwidth*DefaultMemoryEff)
	ctxCore, ctxKV := prompts*attn*2048*2049/2/peak, prompts*2048*kvToken/kvBW
	genCore, genKV := decodes*2*attn*3072/2/peak, decodes*3072*kvToken/kvBW
	require.Greater(t, gemm, stream, "the precondition: the GEMMs compute")
	require.Greater(t, genKV, genCore, "the precondition: generation attention streams its KV")
	require.Greater(t, ctxCore, ctxKV, "the precondition: context attention computes")
	sec := gemm + ctxCore + genKV
	tokens := prompts*2048 + decodes
	ar := hw.Fabric.Collective(flight.KindAllreduce, []int{0, 1}, int(math.Ceil(tokens*float64(m.Hidden*m.ActBytes))))
	want := time.Duration(math.Round(sec*1e9)) + time.Duration(2*m.Layers)*ar + hw.StepOverhead
	assert.InDelta(t, want, st.Step, 2, "step")
}

// Attention-DP (Llama-3-8B FP8 on two H200s, tp=1,dp=2,adp): each rank
// runs its DP index's attention with every head and its own KV, then the
// FFN of both indices' tokens split over the two ranks, the LM head on
// each (TP 1), one allreduce a layer of both indices' activations; the
// throughput counts both indices. The indices prefill apart, in lumps (a
// prompt; with chunked prefill, a chunk: k of them a prompt, each 1/k of
// its work): an index starts f = k*batch/out lumps a step on average, so
// a share q = 1-(1-f)^2 of steps has one index prefilling (the busiest),
// 2f/q lumps over both on average, and the rest none; a step is the mean.
func TestOfflineAttentionDPClosedForm(t *testing.T) {
	hw := Hardwares["h200-nvlink-ib400"]
	m := fp8(Models["llama-3-8b"])
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 2, AttentionDP: true}
	for _, c := range []struct {
		batch       float64
		in, out, k  int
		sch         Scheduler
		description string
	}{
		{16, 1000, 1000, 1, Scheduler{MaxBatch: 16}, "the FFN streams its weights"},
		{256, 1000, 1000, 1, Scheduler{MaxBatch: 256}, "the FFN computes"},
		{64, 6000, 1000, 3, Scheduler{MaxBatch: 64, MaxTokens: 2048, Chunked: true}, "prompts in 3 chunks"},
	} {
		st, err := Placement{Model: m, HW: hw}.Offline(l, c.sch, c.in, c.out)
		require.NoError(t, err)
		require.Equal(t, "max_batch", st.Bound)
		in, k := float64(c.in), float64(c.k)
		f := k * c.batch / float64(c.out)
		decodes := c.batch - c.batch/float64(c.out)
		ctx := in + float64(c.out/2)
		q := 1 - (1-f)*(1-f)
		nl := float64(m.Layers)
		lm := float64(m.Vocab) * float64(m.Hidden)
		ffnParams := 3 * float64(m.Hidden) * float64(m.FFN) * nl
		attnParams := m.AttnParams() * nl
		kvToken := m.KVBytesPerToken() // every KV head on the rank
		core := 2 * float64(m.Layers*m.Heads*m.HeadDim)
		peak := hw.Peak("fp8") * DefaultComputeEff
		// roof is a GEMM kernel and an attention kernel after it, each
		// the larger of its compute and its memory time.
		roof := func(flops, weights, attnFLOPs, kv float64) float64 {
			return math.Max(flops/peak, weights/(hw.HBMBandwidth*DefaultMemoryEff)) + math.Max(attnFLOPs/peak, kv/(hw.HBMBandwidth*DefaultKVEff))
		}
		// step is the seconds of a step whose busiest index starts
		// busiest lumps, both together total: the busiest index's
		// projections and context attention, its generation attention
		// (a kernel of its own), the FFN.
		step := func(busiest, total float64) float64 {
			attn := roof(busiest*2*attnParams*in/k+decodes*2*attnParams, attnParams, busiest*core*in*(in+1)/k, busiest*in/k*kvToken)
			gen := roof(0, 0, decodes*2*core*ctx, decodes*ctx*kvToken)
			tokens := total*in/k + 2*decodes
			ffn := roof(2*ffnParams*tokens/2+2*lm*(total/k+2*decodes), ffnParams/2+lm, 0, 0)
			ar := hw.Fabric.Collective(flight.KindAllreduce, []int{0, 1}, int(math.Ceil(tokens*float64(m.Hidden*m.ActBytes))))
			return attn + gen + ffn + (time.Duration(m.Layers) * ar).Seconds()
		}
		want := time.Duration(math.Round(((1-q)*step(0, 0)+q*step(1, 2*f/q))*1e9)) + hw.StepOverhead
		assert.InDelta(t, want, st.Step, 2, "step: %s", c.description)
		assert.InDelta(t, 2*c.batch/want.Seconds(), st.Throughput, 1e-6*st.Throughput, "both DP indices: %s", c.description)
	}
}

// Stages split the layers as TensorRT-LLM does when they do not divide
// evenly (Llama-3.1-405B's 126 over 8: six of 16, two of 15), the first
// stages one more; every layer on exactly one stage.
func TestStageLayers(t *testing.T) {
	m := fp8(Models["llama-3.1-405b"])
	s := Placement{Model: m, HW: Hardwares["h200-nvlink-ib400"]}.side(topology.Layout{TP: 1, PP: 8, CP: 1, DP: 1}, 0)
	next := 0
	var sizes []int
	for pp := range 8 {
		lo, hi := s.stageLayers(pp)
		assert.Equal(t, next, lo, "stage %d starts where %d ended", pp, pp-1)
		next = hi
		sizes = append(sizes, hi-lo)
	}
	assert.Equal(t, m.Layers, next)
	assert.Equal(t, []int{16, 16, 16, 16, 16, 16, 15, 15}, sizes)
	// The 16-layer stages pace the pipeline: a step is 8 rounds of one.
	st, err := Placement{Model: m, HW: s.hw}.Offline(s.l, Scheduler{}, 1000, 1000)
	require.NoError(t, err)
	x := mix{prefills: st.Prefills / 8, in: 1000, decodes: (st.Batch - st.Prefills) / 8, ctx: 1500}
	assert.Equal(t, 8*s.mixedStage(0, x)+s.hw.StepOverhead, st.Step)
	assert.Greater(t, s.mixedStage(0, x), s.mixedStage(6, x), "16 layers against 15")
}
