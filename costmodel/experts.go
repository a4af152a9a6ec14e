package costmodel

import (
	"math"
	"sync"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
)

// Expert parallelism (topology.Layout.EP). The FFN ranks of a stage split
// the routed experts into EP parts, each part's experts over the other
// FFNRanks/EP ranks (expert TP). A rank holds as many expert weights as
// without EP, so memory is unchanged; what changes is:
//
//   - balance: a step waits for its busiest part. With routing uniform
//     over the experts, a part's token-expert pairs and its touched
//     experts are binomial, and the step pays the expected maximum over
//     the EP parts, not the mean (expert TP splits every expert over every
//     rank and is balanced by construction). Real routers are skewed and
//     engines rebalance (EPLB); uniform routing is the model's middle.
//     The balance takes every expert as open to every token even when the
//     model groups them (topology.Routing): a grouped router's busiest
//     part is 5-12% busier at decode sizes (16 to 256 tokens, EP 8, by a
//     review's Monte Carlo), which this leaves out; the dispatch copies
//     follow the groups.
//   - collectives, under attention-DP only: each rank holds its own DP
//     index's tokens, so an MoE layer dispatches each token to the ranks
//     that hold its experts and combines their outputs back (two
//     all-to-alls, as DeepEP and TensorRT-LLM's wide-EP do), instead of
//     an allreduce of every DP index's tokens over every FFN rank. Without
//     attention-DP every TP rank already holds every token after the
//     attention's allreduce: it computes its own experts and the FFN's
//     allreduce combines them, so the collectives are TP's.

// epParts is the expert-parallel size of this side (1: none).
func (s side) epParts() int { return s.l.Experts() }

// routedImbalance is the busiest EP part's share of the routed experts'
// FLOPs over the mean part's, for tokens tokens in the FFN group: the
// expected maximum over EP parts of Binomial(tokens*k, 1/EP) over its mean.
func (s side) routedImbalance(tokens float64) float64 {
	ep := s.epParts()
	if ep == 1 || !s.m.MoE() {
		return 1
	}
	return maxOverMean(tokens*float64(s.m.ActiveExperts), 1/float64(ep), ep)
}

// touchedImbalance is the same for the expert weights a step reads: each
// of a part's Experts/EP experts is touched with probability
// 1-(1-k/E)^tokens.
func (s side) touchedImbalance(tokens float64) float64 {
	ep := s.epParts()
	if ep == 1 || !s.m.MoE() {
		return 1
	}
	m := s.m
	q := 1 - math.Pow(1-float64(m.ActiveExperts)/float64(m.Experts), tokens)
	return maxOverMean(float64(m.Experts/ep), q, ep)
}

// maxOverMean is E[max of parts iid Binomial(n, p)] / (n p), n rounded to
// an integer; 1 when the mean is 0. Exact up to a mean of 1000 trials'
// worth, the normal approximation beyond (its error there is below 0.1%).
// A decode step of a simulated run asks it again and again with the same
// arguments (its batch size): answers are kept (imbalanceMemo).
func maxOverMean(n, p float64, parts int) float64 {
	n = math.Round(n)
	k := imbalanceKey{n, p, parts}
	if v, ok := imbalanceMemo.get(k); ok {
		return v
	}
	v := maxOverMeanOf(n, p, parts)
	imbalanceMemo.put(k, v)
	return v
}

func maxOverMeanOf(n, p float64, parts int) float64 {
	mean := n * p
	if mean <= 0 || p >= 1 || parts <= 1 {
		return 1
	}
	sd := math.Sqrt(n * p * (1 - p))
	if mean > 1000 {
		return (mean + sd*normalMax(parts)) / mean
	}
	// E[max] = sum over x >= 0 of P(max > x) = 1 - F(x)^parts.
	lp, lq := math.Log(p), math.Log1p(-p)
	lgn, _ := math.Lgamma(n + 1)
	var cdf, e float64
	hi := math.Min(n, math.Ceil(mean+12*sd+12))
	for x := 0.0; x <= hi; x++ {
		lgx, _ := math.Lgamma(x + 1)
		lgr, _ := math.Lgamma(n - x + 1)
		cdf += math.Exp(lgn - lgx - lgr + x*lp + (n-x)*lq)
		e += 1 - math.Pow(math.Min(cdf, 1), float64(parts))
	}
	return e / mean
}

// normalMax is the expected maximum of parts standard normals, by
// integrating 1-Phi^k above 0 and Phi^k below it (kept: a pure function of
// parts).
func normalMax(parts int) float64 {
	k := imbalanceKey{parts: parts, n: -1}
	if v, ok := imbalanceMemo.get(k); ok {
		return v
	}
	v := normalMaxOf(parts)
	imbalanceMemo.put(k, v)
	return v
}

func normalMaxOf(parts int) float64 {
	const h = 1.0 / 256
	k := float64(parts)
	var e float64
	for x := h / 2; x < 10; x += h {
		phi := 0.5 * math.Erfc(-x/math.Sqrt2)
		e += (1 - math.Pow(phi, k)) * h
		e -= math.Pow(1-phi, k) * h // Phi(-x)^k
	}
	return e
}

// dispatchCopies is how many EP parts one token is sent to: the distinct
// parts among its experts (DeepEP sends a token once to each rank that
// holds one of its experts), expected under the model's routing
// (topology.Routing.Parts: uniform, within the token's groups when the
// model limits them).
func (s side) dispatchCopies() float64 { return s.m.Routing().Parts(s.epParts()) }

// ffnCollectives is the FFN collectives of stage pp under attention-DP,
// over all its layers, for a micro-batch whose DP indices put rows[i]
// tokens each into the FFN: a dense layer (or an MoE layer without EP)
// allreduces every index's activations over the FFN ranks; an MoE layer
// with EP dispatches and combines (two all-to-alls over the FFN ranks),
// each rank sending its share of its index's tokens (over TP) to
// dispatchCopies parts, and to every expert-TP rank of each.
func (s side) ffnCollectives(pp int, rows []float64) time.Duration {
	var all, busiest float64
	for _, r := range rows {
		all += r
		busiest = max(busiest, r)
	}
	row := float64(s.m.Hidden * s.m.ActBytes)
	members := s.ffnMembers(pp)
	reduce := s.allreduce(members, all*row)
	dense, moe := s.layerKinds(pp)
	if s.epParts() == 1 || moe == 0 {
		return times(int(dense+moe), reduce) // whole layer counts
	}
	expertTP := float64(s.l.FFNRanks() / s.epParts())
	send := busiest / float64(s.l.TP) * s.dispatchCopies() * expertTP * row
	a2a := s.hw.Fabric.Collective(flight.KindAlltoall, members, int(math.Ceil(send)))
	return add(times(int(dense), reduce), times(2*int(moe), a2a))
}

// imbalanceKey names one answer of maxOverMean (or, with n = -1, of
// normalMax).
type imbalanceKey struct {
	n, p  float64
	parts int
}

// floatMemo keeps the answers of a pure function of its key, up to a bound
// (then it starts over), safe for concurrent use: every rank of a run in
// one process prices its steps through it.
type floatMemo[K comparable] struct {
	mu sync.Mutex
	m  map[K]float64
}

const floatMemoCap = 1 << 16

var imbalanceMemo floatMemo[imbalanceKey]

func (f *floatMemo[K]) get(k K) (float64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[k]
	return v, ok
}

func (f *floatMemo[K]) put(k K, v float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= floatMemoCap {
		f.m = map[K]float64{}
	}
	f.m[k] = v
}
