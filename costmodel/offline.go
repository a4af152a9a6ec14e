package costmodel

import (
	"fmt"
	"math"
	"time"

	"github.com/rankrun/rankrun/topology"
)

// Scheduler is a serving engine's step scheduler: what one forward step
// of an instance may hold. Its zero value is the defaults a serving engine
// uses (TensorRT-LLM's LLM API: max_batch_size 2048, max_num_tokens 8192,
// chunked prefill off).
type Scheduler struct {
	// MaxBatch is the most requests one step holds, prefilling and
	// decoding together (0: DefaultMaxBatch).
	MaxBatch int
	// MaxTokens is the token budget of one step: the prompt tokens it
	// prefills plus one for each request it decodes (0:
	// DefaultMaxTokens).
	MaxTokens int
	// Chunked lets a prompt longer than the budget prefill over several
	// steps; without it such a prompt can never be scheduled.
	Chunked bool
	// Overlap prepares each step on the host while the GPU runs the one
	// before (TensorRT-LLM's overlap scheduler, on unless
	// disable_overlap_scheduler in its PyTorch backend): a step takes the
	// longer of its GPU time and the host's cost (Hardware.StepOverhead),
	// not their sum. Off, as in the runtime's own executor, they add.
	Overlap bool
}

// The scheduler's defaults: TensorRT-LLM's LLM API (llm_args.py,
// max_batch_size and max_num_tokens).
const (
	DefaultMaxBatch  = 2048
	DefaultMaxTokens = 8192
)

// Limits is s with its defaults applied.
func (s Scheduler) Limits() (maxBatch, maxTokens int) {
	maxBatch, maxTokens = s.MaxBatch, s.MaxTokens
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	return maxBatch, maxTokens
}

// String is the scheduler as its flags read.
func (s Scheduler) String() string {
	b, t := s.Limits()
	out := fmt.Sprintf("max_batch=%d max_tokens=%d chunked=%t", b, t, s.Chunked)
	if s.Overlap {
		out += " overlap=true"
	}
	return out
}

// Steady is an aggregated instance's offline steady state: every request
// of in prompt and out generated tokens queued at once, the instance
// batching in flight (a finished request's place taken by a new prompt,
// prefilled in the same step as the others decode).
type Steady struct {
	// Batch is the requests resident in each DP index of the instance,
	// and Bound what holds it there: "kv" (the KV cache is full),
	// "max_batch" or "max_tokens" (the scheduler's limits).
	Batch float64
	Bound string
	// Prefills is the prompts a step starts, on average (Batch/out).
	Prefills float64
	// Step is one forward step, every stage and micro-batch and the host
	// cost included.
	Step time.Duration
	// Throughput is the output tokens a second of the whole instance
	// (every DP index): Batch x DP a step.
	Throughput float64
}

// Offline is the offline steady state of an instance of layout l that
// prefills and decodes on the same ranks (aggregated serving) under sch,
// for requests of in prompt and out generated tokens. Each request holds
// in+out tokens of KV; a step decodes Batch-Prefills requests at their
// mean context (in + out/2) and prefills Prefills prompts, the weights
// read once for both. With PP stages, PP micro-batches are in flight and a
// step is PP rounds of the busiest stage (or one round trip, if longer);
// the layers may split unevenly over them. It needs cp = 1, and TP and the
// KV heads dividing one another as the runtime does (topology.ValidateFor).
func (p Placement) Offline(l topology.Layout, sch Scheduler, in, out int) (Steady, error) {
	if err := p.checkServing("offline", l, sch, in, out); err != nil {
		return Steady{}, err
	}
	maxBatch, maxTokens := sch.Limits()
	s := p.side(l, 0)
	st := Steady{Batch: float64(maxBatch), Bound: "max_batch"}
	if kv := s.kvTokens() / float64(in+out); kv < st.Batch {
		st.Batch, st.Bound = math.Floor(kv), "kv"
	}
	// A step computes Batch/out prompts of in tokens and the rest one
	// token each: in+out-1 tokens for every out requests.
	if tok := float64(maxTokens) * float64(out) / float64(in+out-1); tok < st.Batch {
		st.Batch, st.Bound = tok, "max_tokens"
	}
	switch {
	case st.Batch < 1 && st.Bound == "kv":
		return Steady{}, fmt.Errorf("%w: offline: layout %s holds the KV of no request of %d tokens", ErrInvalid, l, in+out)
	case st.Batch < 1:
		return Steady{}, fmt.Errorf("%w: offline: %s: a step's budget holds less than one request of %d in / %d out", ErrInvalid, sch, in, out)
	}
	st.Prefills = st.Batch / float64(out)
	st.Step = p.step(s, sch.Overlap, mix{prefills: st.Prefills / float64(l.PP), in: in, decodes: (st.Batch - st.Prefills) / float64(l.PP), ctx: float64(in + out/2), chunks: (in + maxTokens - 1) / maxTokens})
	st.Throughput = st.Batch * float64(l.DP) / st.Step.Seconds()
	return st, nil
}

// checkServing refuses (naming the field and the rule, prefixed by what)
// what an aggregated instance of layout l cannot serve under sch:
// requests of in / out tokens, the layout's heads and stages, cp, a
// prompt over the budget without chunked prefill, its experts, its
// weights.
func (p Placement) checkServing(what string, l topology.Layout, sch Scheduler, in, out int) error {
	_, maxTokens := sch.Limits()
	heads := l
	heads.PP = 1 // the layers may split unevenly here
	if err := heads.ValidateFor(p.Model.Geometry(1)); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, what, err)
	}
	switch {
	case l.PP > p.Model.Layers:
		return fmt.Errorf("%w: %s: layout %s: pp = %d: at most the model's %d layers", ErrInvalid, what, l, l.PP, p.Model.Layers)
	case in < 1 || out < 1:
		return fmt.Errorf("%w: %s: in = %d, out = %d: both must be at least 1", ErrInvalid, what, in, out)
	case l.CP != 1:
		return fmt.Errorf("%w: %s: layout %s: cp = %d: throughput is modelled for cp = 1", ErrInvalid, what, l, l.CP)
	case !sch.Chunked && in > maxTokens:
		return fmt.Errorf("%w: %s: in = %d: a prompt longer than max_tokens (%d) needs chunked prefill", ErrInvalid, what, in, maxTokens)
	}
	if err := p.CheckHeads(l); err != nil {
		return fmt.Errorf("%s: layout %s: %w", what, l, err)
	}
	if err := p.CheckExperts(l); err != nil {
		return fmt.Errorf("%s: layout %s: %w", what, l, err)
	}
	if err := p.Fits(l); err != nil {
		return fmt.Errorf("%s: layout %s: %w", what, l, err)
	}
	return nil
}

// step is one in-flight step of s whose every micro-batch is x.
func (p Placement) step(s side, overlap bool, x mix) time.Duration {
	xs := make([]mix, s.l.PP)
	for i := range xs {
		xs[i] = x
	}
	return p.pipelined(s, overlap, xs)
}

// pipelined is one in-flight step of s with micro-batches xs, one for
// each PP stage in flight: the busiest stage's round of every
// micro-batch, or the slowest micro-batch's trip through the stages (the
// activations' sends between them included), whichever is longer (PP
// rounds of the busiest stage when the micro-batches are alike), and the
// step's host cost, after it or (overlap) beside it. An empty
// micro-batch costs nothing.
func (p Placement) pipelined(s side, overlap bool, xs []mix) time.Duration {
	rounds := make([]time.Duration, s.l.PP)
	var gpu time.Duration
	for _, x := range xs {
		if x.tokens() == 0 {
			continue
		}
		var trip time.Duration
		for pp := range s.l.PP {
			t := s.mixedStage(pp, x)
			rounds[pp] = add(rounds[pp], t)
			trip = add(trip, t)
			if pp+1 < s.l.PP {
				trip = add(trip, s.link(0, pp).Time(int(math.Ceil(x.tokens()))*s.m.Hidden*s.m.ActBytes))
			}
		}
		gpu = max(gpu, trip)
	}
	for _, r := range rounds {
		gpu = max(gpu, r)
	}
	if overlap {
		return max(gpu, p.HW.StepOverhead)
	}
	return add(gpu, p.HW.StepOverhead)
}

// mix is one micro-batch of an in-flight step, per DP index: prefills
// prompts of in tokens and decodes requests of mean context ctx (a steady
// state's averages, so fractional); a prompt prefills over chunks steps
// (1 unless chunked prefill splits it to fit the token budget).
type mix struct {
	prefills float64
	in       int
	decodes  float64
	ctx      float64
	chunks   int
}

// tokens is the tokens the micro-batch computes.
func (x mix) tokens() float64 { return x.prefills*float64(x.in) + x.decodes }

// kvTokens is the tokens of KV one DP index of the instance holds: on
// the tightest stage, the HBM a rank has left after its weights
// (WeightShare of it, as KVBlocks) over one token's KV on a rank (its
// stage's layers, its KV heads).
func (s side) kvTokens() float64 {
	tokens := math.Inf(1)
	for pp := range s.l.PP {
		room := WeightShare*s.hw.HBMCapacity - s.weightsOn(pp)
		if room <= 0 {
			return 0
		}
		tokens = min(tokens, room/(float64(s.layersOn(pp))*s.kvBytesPerTokenLayer()))
	}
	return tokens
}

// mixedStage is micro-batch x on stage pp: its prompts' and its decodes'
// attention FLOPs and KV traffic, each request's as alone (the decodes'
// attention core a kernel of its own), the FFN's FLOPs
// over all the step's tokens, and the stage's weights
// read once (an MoE's touched experts for every token of the step); the
// collectives as stageTime's over the step's tokens.
func (s side) mixedStage(pp int, x mix) time.Duration {
	pa := s.prefillAttn(pp, []Seq{{Tokens: x.in}})
	da := s.genAttn(pp, 1, x.ctx)
	if s.l.AttentionDP {
		return s.adpStage(pp, x, pa, da)
	}
	tok := x.tokens()
	dense, moe := s.layerKinds(pp)
	// Context attention with the matrix multiplies; generation attention,
	// its own kernel, apart (roofline).
	w := work{flops: x.prefills*pa.flops + x.decodes*da.flops, cflops: x.prefills * pa.cflops, weights: pa.weights, kv: x.prefills * pa.kv}
	gen := work{cflops: x.decodes * da.cflops, kv: x.decodes * da.kv}
	// The FFN's FLOPs over the step's tokens at once (an EP part's
	// imbalance is the step's, not one request's), the LM head a row per
	// request.
	ffn := s.ffnWork(dense, moe, tok, s.ffnSplit())
	ffn.weights = s.ffnWork(dense, moe, tok, 1).weights
	if pp == s.l.PP-1 {
		ffn.add(s.lmHead(x.prefills + x.decodes))
	}
	w.add(ffn)
	act := tok * float64(s.m.Hidden*s.m.ActBytes)
	return add(seconds(s.roofline(w)+s.roofline(gen)), times(2*s.layersOn(pp), s.allreduce(s.tpMembers(0, pp), act)))
}

// adpStage is mixedStage under attention-DP: each DP index's attention on
// its own ranks, the FFN over every rank for every index. The indices meet
// at every MoE layer, so a step waits for its busiest index's attention,
// and an index's prefill work comes in lumps (a prompt, or with chunked
// prefill a chunk of one): it starts floor(f) or floor(f)+1 lumps in a
// step (f its mean, prompts a step x chunks a prompt), apart from the
// others. The busiest starts floor(f)+1 in a share q = 1-(1-frac)^DP of
// steps (frac f's fraction; those steps' +1s number frac*DP/q, which keeps
// the lumps at f*DP a step); a step's time is the two cases' mean. A lump
// is a prompt's attention and tokens over its chunks.
func (s side) adpStage(pp int, x mix, pa, da work) time.Duration {
	k := float64(max(1, x.chunks))
	lump := pa
	lump.scaleFLOPs(1 / k)
	lump.kv /= k
	f := x.prefills * k
	lo, dp := math.Floor(f), float64(s.l.DP)
	frac := f - lo
	q := 0.0
	if frac > 0 {
		q = 1 - math.Pow(1-frac, dp)
	}
	t := (1 - q) * s.adpStep(pp, x, lump, da, lo, lo*dp)
	if q > 0 {
		t += q * s.adpStep(pp, x, lump, da, lo+1, (lo+frac/q)*dp)
	}
	return seconds(t)
}

// adpStep is the seconds of stage pp's step of x under attention-DP when
// its busiest DP index starts busiest lumps (a lump's attention lump, of
// x.in/x.chunks tokens) and all of them total: the busiest index's
// attention (da a decode's; the decodes' core a kernel of its own), then
// the FFN over every index's tokens and
// its collectives (the busiest index's rows set the all-to-all), the LM
// head a row per prompt finished.
func (s side) adpStep(pp int, x mix, lump, da work, busiest, total float64) float64 {
	dp, k := float64(s.l.DP), float64(max(1, x.chunks))
	in := float64(x.in) / k
	attn := work{flops: busiest*lump.flops + x.decodes*da.flops, cflops: busiest * lump.cflops, weights: lump.weights, kv: busiest * lump.kv}
	gen := work{cflops: x.decodes * da.cflops, kv: x.decodes * da.kv}
	all := total*in + dp*x.decodes
	dense, moe := s.layerKinds(pp)
	ffn := s.ffnWork(dense, moe, all/dp, s.ffnSplit())
	ffn.scaleFLOPs(dp)
	ffn.weights = s.ffnWork(dense, moe, all, 1).weights
	if pp == s.l.PP-1 {
		ffn.flops += dp * s.lmHead(total/k/dp+x.decodes).flops
		ffn.weights += s.lmHead(1).weights
	}
	rows := make([]float64, s.l.DP)
	rows[0] = busiest*in + x.decodes
	for i := 1; i < s.l.DP; i++ {
		rows[i] = (total-busiest)/(dp-1)*in + x.decodes
	}
	return s.roofline(attn) + s.roofline(gen) + s.roofline(ffn) + s.ffnCollectives(pp, rows).Seconds()
}
