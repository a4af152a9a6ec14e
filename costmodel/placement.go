package costmodel

import (
	"fmt"
	"math"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/fabric"
	"github.com/rankrun/rankrun/topology"
)

// Seq is one request of a batch: its tokens (prefill: the prompt, or a
// chunk of it under chunked prefill; decode: the context so far, prompt
// plus generated) and its DP index. Past and Partial are a prefill
// chunk's: the prompt tokens earlier chunks prefilled (this chunk's
// attention reads their KV) and whether the prompt goes on after it (no
// LM head: no token is sampled); zero for a whole prompt and for decode.
type Seq struct {
	Tokens  int
	DP      int
	Past    int
	Partial bool
}

// Placement is one run's layouts on one world: CTX ranks [0, Ctx.Ranks()),
// GEN ranks after them, world ranks in order on the nodes of HW.Fabric.
// Its methods are pure and safe for concurrent use.
type Placement struct {
	Model    Model
	HW       Hardware
	Ctx, Gen topology.Layout
}

// Validate checks the model, the hardware (it must carry compute figures
// and a peak for the model's precision) and that both layouts hold the
// model's weights (Fits).
func (p Placement) Validate() error {
	if err := p.Model.Validate(); err != nil {
		return err
	}
	if err := p.HW.Validate(); err != nil {
		return err
	}
	if !p.HW.Compute() {
		return fmt.Errorf("%w: hardware %q has no compute figures: pick a GPU (h100, h200, gb200) or a hardware file", ErrInvalid, p.HW.Name)
	}
	if p.HW.Peak(p.Model.Precision) == 0 {
		return fmt.Errorf("%w: hardware %q has no %s peak (model %q computes in %s)", ErrInvalid, p.HW.Name, p.Model.Precision, p.Model.Name, p.Model.Precision)
	}
	if x := p.Model.expertPrecision(); p.Model.MoE() && p.HW.Peak(x) == 0 {
		return fmt.Errorf("%w: hardware %q has no %s peak (model %q computes its experts in %s)", ErrInvalid, p.HW.Name, x, p.Model.Name, x)
	}
	for _, s := range []struct {
		name string
		l    topology.Layout
	}{{"ctx", p.Ctx}, {"gen", p.Gen}} {
		if err := p.CheckHeads(s.l); err != nil {
			return fmt.Errorf("%s layout %s: %w", s.name, s.l, err)
		}
		if err := p.CheckExperts(s.l); err != nil {
			return fmt.Errorf("%s layout %s: %w", s.name, s.l, err)
		}
		if err := p.Fits(s.l); err != nil {
			return fmt.Errorf("%s layout %s: %w", s.name, s.l, err)
		}
	}
	return nil
}

// CheckHeads reports (naming the field and the rule) whether layout l's
// tensor parallelism splits the model's attention heads evenly: each TP
// rank computes heads/tp whole query heads. Under attention-DP a rank
// holds every head and any tp goes, and a zero layout (none given) has
// nothing to split. (topology.Layout.ValidateFor checks the KV heads,
// which the geometry carries; the query heads live here.)
func (p Placement) CheckHeads(l topology.Layout) error {
	if l.TP < 1 { // no layout (a Placement of the model alone): nothing to split
		return nil
	}
	if l.AttentionDP || p.Model.Heads%l.TP == 0 {
		return nil
	}
	return fmt.Errorf("%w: tp = %d: model %q's %d attention heads do not split evenly over it (heads %% tp must be 0)", ErrInvalid, l.TP, p.Model.Name, p.Model.Heads)
}

// CheckExperts reports (naming the field and the rule) whether layout l's
// expert parallelism suits the model: ep > 1 needs routed experts, and ep
// must divide their number (each part holds experts/ep whole experts).
func (p Placement) CheckExperts(l topology.Layout) error {
	ep := l.Experts()
	switch {
	case ep == 1:
		return nil
	case !p.Model.MoE():
		return fmt.Errorf("%w: ep = %d: model %q has no routed experts (ep needs an MoE model)", ErrInvalid, ep, p.Model.Name)
	case p.Model.Experts%ep != 0:
		return fmt.Errorf("%w: ep = %d must divide model %q's %d routed experts", ErrInvalid, ep, p.Model.Name, p.Model.Experts)
	}
	return nil
}

// WeightShare is the fraction of HBM a rank's weights may take; the rest is
// the KV cache's and the activations'.
const WeightShare = 0.9

// Fits reports (as an error naming both sizes) whether a rank of layout l
// holds more weights than WeightShare of its HBM.
func (p Placement) Fits(l topology.Layout) error {
	w := p.side(l, 0).weightsPerRank()
	if limit := WeightShare * p.HW.HBMCapacity; w > limit {
		return fmt.Errorf("%w: %.1f GB of %s weights per rank exceed %.0f%% of the %.0f GB of HBM of %s",
			ErrInvalid, w/1e9, p.Model.Name, 100*WeightShare, p.HW.HBMCapacity/1e9, p.HW.Name)
	}
	return nil
}

// Prefill is how long the CTX executor group of batch takes to prefill it:
// its roofline time and the step's fixed host cost (Hardware.StepOverhead).
func (p Placement) Prefill(batch []Seq) time.Duration {
	return add(p.side(p.Ctx, 0).prefill(batch), p.HW.StepOverhead)
}

// Decode is how long the GEN executor group of batch takes for one decode
// step of every request in it, the step's fixed host cost included.
func (p Placement) Decode(batch []Seq) time.Duration {
	return add(p.side(p.Gen, p.Ctx.Ranks()).decode(batch), p.HW.StepOverhead)
}

// side is one instance on the world: its layout and first world rank.
type side struct {
	m     Model
	hw    Hardware
	l     topology.Layout
	first int
}

func (p Placement) side(l topology.Layout, first int) side {
	return side{m: p.Model, hw: p.HW, l: l, first: first}
}

// world maps instance ranks to world ranks.
func (s side) world(c topology.Coord) int { return s.first + s.l.RankOf(c) }

// tpMembers is the TP group at (dp, pp), CP index 0, in world ranks.
func (s side) tpMembers(dp, pp int) []int {
	out := make([]int, s.l.TP)
	for i := range out {
		out[i] = s.world(topology.Coord{DP: dp, PP: pp, TP: i})
	}
	return out
}

// cpMembers is the CP group at (dp, pp), TP index 0.
func (s side) cpMembers(dp, pp int) []int {
	out := make([]int, s.l.CP)
	for i := range out {
		out[i] = s.world(topology.Coord{DP: dp, PP: pp, CP: i})
	}
	return out
}

// ffnMembers is the group an attention-DP FFN spans at stage pp: every TP
// and DP index, CP index 0.
func (s side) ffnMembers(pp int) []int {
	out := make([]int, 0, s.l.TP*s.l.DP)
	for dp := range s.l.DP {
		for tp := range s.l.TP {
			out = append(out, s.world(topology.Coord{DP: dp, PP: pp, TP: tp}))
		}
	}
	return out
}

// link is the link from stage pp to stage pp+1 of DP index dp.
func (s side) link(dp, pp int) fabric.Link {
	return s.hw.Fabric.Between(s.world(topology.Coord{DP: dp, PP: pp}), s.world(topology.Coord{DP: dp, PP: pp + 1}))
}

func (s side) allreduce(members []int, bytes float64) time.Duration {
	return s.hw.Fabric.Collective(flight.KindAllreduce, members, int(math.Ceil(bytes)))
}

func (s side) allgather(members []int, bytes float64) time.Duration {
	return s.hw.Fabric.Collective(flight.KindAllgather, members, int(math.Ceil(bytes)))
}

// kvHeadsPerRank is the KV heads a rank holds: split over TP (one each,
// duplicated, when TP exceeds them), all of them under attention-DP.
func (s side) kvHeadsPerRank() int {
	if s.l.AttentionDP {
		return s.m.KVHeads
	}
	return max(1, s.m.KVHeads/s.l.TP)
}

// attnSplit is how many ranks split one DP index's attention: TP, or 1
// under attention-DP (every rank holds every head).
func (s side) attnSplit() float64 {
	if s.l.AttentionDP {
		return 1
	}
	return float64(s.l.TP)
}

// ffnSplit is how many ranks split the FFN (experts included): TP, or
// TP x DP under attention-DP.
func (s side) ffnSplit() float64 {
	if s.l.AttentionDP {
		return float64(s.l.TP * s.l.DP)
	}
	return float64(s.l.TP)
}

// weightsOn is the bytes of weights a rank of stage pp holds: its layers
// (attention over attnSplit but MLA's down projections whole, FFN and
// experts over ffnSplit) and, on every
// rank to be safe, the embedding and LM head over TP.
func (s side) weightsOn(pp int) float64 {
	m := s.m
	dense, moe := s.layerKinds(pp)
	w := float64(s.layersOn(pp)) * m.attnPerRank(s.attnSplit()) * m.WeightBytes
	w += dense * m.denseFFNParams() * m.WeightBytes / s.ffnSplit()
	w += moe * (m.routerParams()*m.WeightBytes + float64(m.Experts+m.SharedExperts)*m.expertParams()*m.expertBytes()) / s.ffnSplit()
	return w + 2*float64(m.Vocab)*float64(m.Hidden)*m.WeightBytes/float64(s.l.TP)
}

// weightsPerRank is the bytes of weights one rank holds: its stage's
// layers (attention over attnSplit, FFN and experts over ffnSplit) and, on
// every rank to be safe, the embedding and LM head over TP.
func (s side) weightsPerRank() float64 {
	m := s.m
	moe := float64(m.moeLayers()) / float64(s.l.PP)
	dense := float64(m.Layers)/float64(s.l.PP) - moe
	w := float64(m.Layers) / float64(s.l.PP) * m.attnPerRank(s.attnSplit()) * m.WeightBytes
	w += dense * m.denseFFNParams() * m.WeightBytes / s.ffnSplit()
	w += moe * (m.routerParams()*m.WeightBytes + float64(m.Experts+m.SharedExperts)*m.expertParams()*m.expertBytes()) / s.ffnSplit()
	return w + 2*float64(m.Vocab)*float64(m.Hidden)*m.WeightBytes/float64(s.l.TP)
}

// roofline is the time of w on one rank: its matrix multiplies, the
// larger of their compute time (the experts' FLOPs at their precision's
// peak, the rest at the model's) and their weights' read, then attention's
// core, the larger of its compute time (at the KV cache's precision) and
// its KV cache traffic; each memory time at its achieved fraction of HBM
// bandwidth. The two add: one CUDA stream runs a layer's GEMMs and its
// attention kernel one after the other, so a step's memory-bound
// attention cannot hide under its compute-bound GEMMs. A step that mixes
// prefills and decodes runs context and generation attention as two
// kernels too (TensorRT-LLM's FMHA and XQA): its callers time them apart.
func (s side) roofline(w work) float64 {
	c := s.computeTime(w.flops, s.m.Precision)
	if w.xflops > 0 {
		c += s.computeTime(w.xflops, s.m.expertPrecision())
	}
	gemm := math.Max(c, w.weights/(s.hw.HBMBandwidth*s.hw.memoryEff()))
	var core float64
	if w.cflops > 0 {
		core = s.computeTime(w.cflops, s.corePrecision())
	}
	return gemm + math.Max(core, w.kv/(s.hw.HBMBandwidth*s.hw.KVEffOrDefault()))
}

// computeTime is flops at precision's achieved peak.
func (s side) computeTime(flops float64, precision string) float64 {
	return flops / (s.hw.Peak(precision) * s.hw.ComputeEffFor(precision))
}

// corePrecision is the model's corePrecision, or its own precision on
// hardware with no peak for that (a user's hardware file may list fp8
// alone; the model's own is checked to be there).
func (s side) corePrecision() string {
	if c := s.m.corePrecision(); s.hw.Peak(c) > 0 {
		return c
	}
	return s.m.Precision
}

// seconds is v seconds as a Duration, saturated at the longest one,
// never: a float beyond int64 converts to an undefined value (a step of
// 1e300 s came out as 0 and a throughput of millions of tokens a second).
// Every sum and multiple of the model's times saturates too (add, times):
// a never plus a step overhead wrapped to a negative step.
func seconds(v float64) time.Duration {
	if ns := math.Round(v * 1e9); ns < math.MaxInt64 {
		return time.Duration(ns)
	}
	return never
}

// never is the longest Duration: a time past it stays there.
const never = time.Duration(math.MaxInt64)

// add is the sum of ds, saturated at never.
func add(ds ...time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		if d > 0 && t > never-d {
			return never
		}
		t += d
	}
	return t
}

// times is n*d (n, d >= 0), saturated at never.
func times[N ~int | ~int64](n N, d time.Duration) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if float64(d) >= float64(never)/float64(n) {
		return never
	}
	return time.Duration(n) * d
}

// KVBlocks is how many KV blocks of geom a rank of l has room for: the
// WeightShare of its HBM less its weights (the rest is left to
// activations), over the bytes of one of its blocks. It is 0 when the
// weights leave nothing or l cannot hold geom.
func (p Placement) KVBlocks(l topology.Layout, geom topology.Model) int {
	sh, err := l.Shard(geom, 0)
	if err != nil {
		return 0
	}
	room := WeightShare*p.HW.HBMCapacity - p.side(l, 0).weightsPerRank()
	if room <= 0 {
		return 0
	}
	return int(math.Min(room/float64(sh.BlockBytes()), 1<<30))
}
