package costmodel

import (
	"fmt"
	"math"
	"time"

	"github.com/rankrun/rankrun/topology"
)

// Benchmark is a finite offline run, as trtllm-bench's throughput command
// measures one: Requests requests of In prompt and Out generated tokens,
// all queued at time zero, run to the last one's end under Scheduler.
type Benchmark struct {
	Requests  int
	In, Out   int
	Scheduler Scheduler
}

// Run is what a Benchmark took: its whole time, its steps, the most
// requests resident at once and its throughput (every request's output
// tokens over the whole time, the figure trtllm-bench reports as "Total
// Output Throughput").
type Run struct {
	Duration   time.Duration
	Steps      int
	Resident   int
	Throughput float64
}

// Benchmark runs b on an aggregated instance of layout l step by step, as
// an in-flight batching engine schedules it (TensorRT-LLM's
// GUARANTEED_NO_EVICT capacity scheduler and its token budget):
//
//   - A waiting request is admitted when the KV of its whole sequence
//     (In+Out tokens) fits beside the resident ones' and fewer than
//     max_batch are resident: with identical requests they arrive and
//     leave in waves, not in the steady trickle Offline assumes, and a
//     run of few waves pays for its ramp and its tail.
//   - A step decodes one token of every resident request past its prompt,
//     then spends what is left of max_tokens on prompts, first come first
//     served: a whole prompt, or with chunked prefill also a chunk of the
//     next (a chunk's attention priced as its share of the prompt's). A
//     prompt's last step samples its first token.
//   - A step costs what Offline's steady step costs for its mix (mixedStage
//     on every stage, the host cost after it or beside it), at its
//     decodes' mean context.
//
// Stretches of steps in which nothing is admitted, prefilled or finished
// differ only in their contexts, each a token longer than the last, and
// a step's time is convex and piecewise linear in the context: they are
// summed in closed form (sumAffine). It needs dp = 1 and cp = 1 (no
// attention-DP: Offline models that steady state) and what Offline needs.
func (p Placement) Benchmark(l topology.Layout, b Benchmark) (Run, error) {
	switch {
	case b.Requests < 1:
		return Run{}, fmt.Errorf("%w: benchmark: requests = %d: must be at least 1", ErrInvalid, b.Requests)
	case l.DP != 1 || l.AttentionDP:
		return Run{}, fmt.Errorf("%w: benchmark: layout %s: dp = %d: a finite run is modelled for one DP index without attention-DP (Offline models those)", ErrInvalid, l, l.DP)
	}
	if _, err := p.Offline(l, b.Scheduler, b.In, b.Out); err != nil { // the same refusals
		return Run{}, fmt.Errorf("benchmark: %w", err)
	}
	maxBatch, maxTokens := b.Scheduler.Limits()
	s := p.side(l, 0)
	in, out := b.In, b.Out
	slots := min(int(math.Floor(s.kvTokens()/float64(in+out))), maxBatch)
	pp := float64(l.PP)
	var (
		run      []cohort
		waiting  = b.Requests
		done     int
		total    float64 // seconds
		r        Run
		resident int
	)
	for done < b.Requests {
		if a := min(waiting, slots-resident); a > 0 {
			run = append(run, cohort{n: a})
			waiting -= a
			resident += a
		}
		r.Resident = max(r.Resident, resident)
		// Decodes first: every request past its prompt.
		var decodes, context int
		for _, c := range run {
			if c.decoding(in) {
				decodes += c.n
				context += c.n * (in + c.gen)
			}
		}
		budget := maxTokens - decodes
		var prefill int
		var next []cohort
		for _, c := range run {
			if c.decoding(in) || budget <= 0 {
				next = append(next, c)
				continue
			}
			left := in - c.pre
			if k := min(c.n, budget/left); k > 0 { // whole prompts (or their rest)
				next = append(next, cohort{n: k, pre: in, gen: 1, fresh: true})
				prefill += k * left
				budget -= k * left
				c.n -= k
			}
			if c.n > 0 && b.Scheduler.Chunked && budget > 0 { // a chunk of the next
				next = append(next, cohort{n: 1, pre: c.pre + budget})
				prefill += budget
				budget = 0
				c.n--
			}
			if c.n > 0 {
				next = append(next, c)
			}
		}
		if prefill == 0 && decodes == 0 { // cannot happen past Offline's refusals; never loop
			return Run{}, fmt.Errorf("%w: benchmark: %s: a step with nothing to run (in = %d, out = %d)", ErrInvalid, b.Scheduler, in, out)
		}
		// Nothing but decodes, and nothing to admit: the next steps repeat
		// this one a token further on, until the first cohort ends.
		k := 1
		if prefill == 0 && decodes > 0 && (waiting == 0 || resident == slots) {
			k = math.MaxInt
			for _, c := range next {
				if c.decoding(in) {
					k = min(k, out-c.gen)
				}
			}
		}
		at := func(i int) float64 {
			x := mix{prefills: float64(prefill) / float64(in) / pp, in: in, decodes: float64(decodes) / pp, chunks: 1}
			if decodes > 0 {
				x.ctx = float64(context+i*decodes) / float64(decodes)
			}
			return p.step(s, b.Scheduler.Overlap, x).Seconds()
		}
		total += sumAffine(at, k)
		r.Steps += k
		run = run[:0]
		for _, c := range next {
			if c.decoding(in) && !c.fresh {
				c.gen += k
			}
			c.fresh = false
			if c.gen >= out {
				done += c.n
				resident -= c.n
				continue
			}
			run = append(run, c)
		}
		run = merge(run)
	}
	r.Duration = time.Duration(math.Round(total * 1e9))
	r.Throughput = float64(b.Requests) * float64(out) / total
	return r, nil
}

// cohort is n identical requests: pre of their prompt's tokens prefilled,
// gen tokens generated (the first by the prompt's last step).
type cohort struct {
	n, pre, gen int
	fresh       bool // its prompt ended this step: it decodes from the next
}

func (c cohort) decoding(in int) bool { return c.pre == in && c.gen >= 1 }

// merge joins neighbouring cohorts in the same state.
func merge(run []cohort) []cohort {
	out := run[:0]
	for _, c := range run {
		if n := len(out); n > 0 && out[n-1].pre == c.pre && out[n-1].gen == c.gen {
			out[n-1].n += c.n
			continue
		}
		out = append(out, c)
	}
	return out
}

// sumAffine is f(0) + ... + f(n-1) for f convex and piecewise linear: a
// stretch whose midpoint lies on the chord of its ends is linear (a kink
// inside would put the midpoint below the chord) and sums to n times its
// ends' mean; any other is halved.
func sumAffine(f func(int) float64, n int) float64 {
	return sumRange(f, 0, n)
}

func sumRange(f func(int) float64, lo, hi int) float64 {
	n := hi - lo
	if n <= 2 {
		var t float64
		for i := lo; i < hi; i++ {
			t += f(i)
		}
		return t
	}
	a, z, mid := f(lo), f(hi-1), lo+(n-1)/2
	chord := a + (z-a)*float64(mid-lo)/float64(n-1)
	if m := f(mid); math.Abs(m-chord) <= 1e-12*math.Max(math.Abs(m), 1e-300) {
		return float64(n) * (a + z) / 2
	}
	return sumRange(f, lo, mid) + sumRange(f, mid, hi)
}
