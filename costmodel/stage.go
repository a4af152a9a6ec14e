package costmodel

import (
	"math"
	"time"
)

// work is what one rank does in one stage, in two kinds of kernel that
// run one after the other (side.roofline): the matrix multiplies, FLOPs
// (xflops those of the experts, at the model's expert precision; flops
// the rest) against the weights they read, and attention's core (QK^T and
// AV) over the KV cache, its cflops (at the KV cache's precision,
// Model.corePrecision) against the kv bytes it reads or writes.
type work struct{ flops, xflops, cflops, weights, kv float64 }

func (w *work) add(o work) {
	w.flops += o.flops
	w.xflops += o.xflops
	w.cflops += o.cflops
	w.weights += o.weights
	w.kv += o.kv
}

// scaleFLOPs multiplies w's FLOPs, every kind, by f (its bytes stay).
func (w *work) scaleFLOPs(f float64) { w.flops *= f; w.xflops *= f; w.cflops *= f }

// stageLayers is the layers [lo, hi) of stage pp: Layers/PP each, the
// first Layers%PP stages one more (an uneven split, as TensorRT-LLM makes
// of Llama-3.1-405B's 126 layers over 8 stages; the runtime's layouts split
// evenly, topology.ValidateFor).
func (s side) stageLayers(pp int) (lo, hi int) {
	per, rem := s.m.Layers/s.l.PP, s.m.Layers%s.l.PP
	lo = pp*per + min(pp, rem)
	hi = lo + per
	if pp < rem {
		hi++
	}
	return lo, hi
}

// layersOn is how many layers stage pp holds.
func (s side) layersOn(pp int) int {
	lo, hi := s.stageLayers(pp)
	return hi - lo
}

// layerKinds is how many dense-FFN and MoE layers stage pp holds.
func (s side) layerKinds(pp int) (dense, moe float64) {
	lo, hi := s.stageLayers(pp)
	if !s.m.MoE() {
		return float64(hi - lo), 0
	}
	d := max(0, min(hi, s.m.DenseLayers)-lo)
	return float64(d), float64(hi - lo - d)
}

// ffnFLOPsPerToken is 2 x the FFN parameters one token multiplies by: of
// a dense FFN all of them (rest); of an MoE layer the router (rest), the
// shared experts and the active routed ones (routed: only its active
// experts).
func (s side) ffnFLOPsPerToken(moe bool) (rest, shared, routed float64) {
	m := s.m
	if !moe {
		return 2 * m.denseFFNParams(), 0, 0
	}
	return 2 * m.routerParams(), 2 * float64(m.SharedExperts) * m.expertParams(), 2 * float64(m.ActiveExperts) * m.expertParams()
}

// ffnBytes is the FFN weight bytes a batch of tokens reads in one layer:
// a dense FFN whole; of an MoE layer the router and the shared experts
// (rest) and the routed experts the batch touches (routed:
// E(1-(1-k/E)^tokens) expected with uniform routing).
func (s side) ffnBytes(moe bool, tokens float64) (rest, routed float64) {
	m := s.m
	if !moe {
		return m.denseFFNParams() * m.WeightBytes, 0
	}
	touched := float64(m.Experts) * (1 - math.Pow(1-float64(m.ActiveExperts)/float64(m.Experts), tokens))
	return m.routerParams()*m.WeightBytes + float64(m.SharedExperts)*m.expertParams()*m.expertBytes(), touched * m.expertParams() * m.expertBytes()
}

// ffnWork is the FFN of the stage's dense and MoE layers for tokens, on
// the busiest rank: FLOPs over flopSplit ranks, weights over ffnSplit,
// the routed experts' share of each scaled by the EP parts' imbalance
// (experts.go) for the tokens one FFN group sees (tokens*ffnSplit/
// flopSplit: a CP index's share in a prefill).
func (s side) ffnWork(dense, moe, tokens, flopSplit float64) work {
	var w work
	for _, k := range []struct {
		n   float64
		moe bool
	}{{dense, false}, {moe, true}} {
		if k.n == 0 {
			continue
		}
		fr, fs, fx := s.ffnFLOPsPerToken(k.moe)
		br, bx := s.ffnBytes(k.moe, tokens)
		if k.moe {
			fx *= s.routedImbalance(tokens * s.ffnSplit() / flopSplit)
			bx *= s.touchedImbalance(tokens)
		}
		w.add(work{flops: k.n * fr * tokens / flopSplit, xflops: k.n * (fs + fx) * tokens / flopSplit, weights: k.n * (br + bx) / s.ffnSplit()})
	}
	return w
}

// lmHead is the LM head over TP for rows tokens (prefill: one per
// request; decode: one per request per step).
func (s side) lmHead(rows float64) work {
	vh := float64(s.m.Vocab) * float64(s.m.Hidden)
	return work{flops: 2 * vh * rows / float64(s.l.TP), weights: vh * s.m.WeightBytes / float64(s.l.TP)}
}

// kvBytesPerTokenLayer is the KV of one token in one layer on one rank
// (all of an MLA latent: every rank holds it).
func (s side) kvBytesPerTokenLayer() float64 {
	if s.m.MLA() {
		return s.m.kvElemsPerTokenLayer() * float64(s.m.KVBytes)
	}
	return 2 * float64(s.kvHeadsPerRank()*s.m.HeadDim*s.m.KVBytes)
}

// byDP groups a micro-batch by DP index, in order of first appearance.
func byDP(batch []Seq) [][]Seq {
	var out [][]Seq
	idx := map[int]int{}
	for _, q := range batch {
		i, ok := idx[q.DP]
		if !ok {
			i = len(out)
			idx[q.DP] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], q)
	}
	return out
}

// micro splits batch round robin into min(PP, len(batch)) micro-batches
// (read only: one of them may be batch itself).
func (s side) micro(batch []Seq) [][]Seq {
	m := min(s.l.PP, len(batch))
	if m == 1 {
		return [][]Seq{batch}
	}
	out := make([][]Seq, m)
	per := (len(batch) + m - 1) / m
	for i := range out {
		out[i] = make([]Seq, 0, per)
	}
	for i, q := range batch {
		out[i%m] = append(out[i%m], q)
	}
	return out
}

func tokens(batch []Seq) float64 {
	var t float64
	for _, q := range batch {
		t += float64(q.Tokens)
	}
	return t
}

// stageTimes is t[pp][j], the time of micro-batch j on stage pp, and
// send[pp][j], its activations' trip from stage pp to pp+1.
func (s side) stageTimes(micro [][]Seq, stage func(pp int, mb []Seq) time.Duration) (t, send [][]time.Duration) {
	t, send = make([][]time.Duration, s.l.PP), make([][]time.Duration, s.l.PP)
	for pp := range s.l.PP {
		t[pp], send[pp] = make([]time.Duration, len(micro)), make([]time.Duration, len(micro))
		for j, mb := range micro {
			t[pp][j] = stage(pp, mb)
			if pp+1 < s.l.PP {
				send[pp][j] = s.link(mb[0].DP, pp).Time(int(tokens(mb)) * s.m.Hidden * s.m.ActBytes)
			}
		}
	}
	return t, send
}

// stageTime is micro-batch mb on stage pp given its attention and FFN
// work; rows(part) is the tokens part puts through the FFN on one rank's
// group (decode: one per request; prefill: its CP share). Without
// attention-DP one rank does both (the roofline of their sum) with two TP
// allreduces of the activations per layer; with it each DP index's
// attention runs on its own ranks (in parallel: the slowest counts), then
// the FFN over every rank with ffnCollectives. per is each layer's other
// collectives (CP).
func (s side) stageTime(pp int, mb []Seq, rows func([]Seq) float64, per time.Duration, attn, ffn func(int, []Seq) work) time.Duration {
	nl := time.Duration(s.layersOn(pp))
	if !s.l.AttentionDP {
		w := sum(pp, mb, attn, ffn)
		per = add(per, times(2, s.allreduce(s.tpMembers(mb[0].DP, pp), rows(mb)*float64(s.m.Hidden*s.m.ActBytes))))
		return add(seconds(s.roofline(w)), times(nl, per))
	}
	var slowest float64
	var perDP []float64
	for _, part := range byDP(mb) {
		w := attn(pp, part)
		slowest = max(slowest, s.roofline(w))
		perDP = append(perDP, rows(part))
	}
	f := ffn(pp, mb)
	return add(seconds(slowest+s.roofline(f)), times(nl, per), s.ffnCollectives(pp, perDP))
}

// sum is attention and FFN together: one rank's whole work on mb.
func sum(pp int, mb []Seq, attn, ffn func(int, []Seq) work) work {
	w := attn(pp, mb)
	w.add(ffn(pp, mb))
	return w
}
