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
//   - A step's requests go whole to its PP micro-batches (microBatches),
//     each priced as Offline's (mixedStage on every stage) at the decodes'
//     mean context, and the step is the pipeline's (pipelined): with
//     fewer prompts than stages a prompt still walks every stage. Then
//     the host cost, after it or beside it.
//
// Stretches of steps in which nothing is admitted, prefilled or finished
// differ only in their contexts, each a token longer than the last, and
// a step's time is convex and piecewise linear in the context: they are
// summed in closed form (sumAffine). It needs dp = 1 (no attention-DP:
// Offline models that steady state), the KV of one request, and what
// Offline needs of a layout (checkServing).
func (p Placement) Benchmark(l topology.Layout, b Benchmark) (Run, error) {
	switch {
	case b.Requests < 1:
		return Run{}, fmt.Errorf("%w: benchmark: requests = %d: must be at least 1", ErrInvalid, b.Requests)
	case l.DP != 1 || l.AttentionDP:
		return Run{}, fmt.Errorf("%w: benchmark: layout %s: dp = %d: a finite run is modelled for one DP index without attention-DP (Offline models those)", ErrInvalid, l, l.DP)
	}
	if err := p.checkServing("benchmark", l, b.Scheduler, b.In, b.Out); err != nil {
		return Run{}, err
	}
	maxBatch, maxTokens := b.Scheduler.Limits()
	s := p.side(l, 0)
	in, out := b.In, b.Out
	slots := min(int(math.Floor(s.kvTokens()/float64(in+out))), maxBatch)
	if slots < 1 {
		return Run{}, fmt.Errorf("%w: benchmark: layout %s holds the KV of no request of %d tokens", ErrInvalid, l, in+out)
	}
	var (
		run, next []cohort // the resident cohorts, and the next step's (two buffers, swapped)
		pieces    []piece
		waiting   = b.Requests
		done      int
		total     float64 // seconds
		r         Run
		resident  int
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
		pieces, next = pieces[:0], next[:0]
		for _, c := range run {
			if c.decoding(in) || budget <= 0 {
				next = append(next, c)
				continue
			}
			left := in - c.pre
			if k := min(c.n, budget/left); k > 0 { // whole prompts (or their rest)
				next = append(next, cohort{n: k, pre: in, gen: 1, fresh: true})
				pieces = append(pieces, piece{n: k, tokens: left})
				prefill += k * left
				budget -= k * left
				c.n -= k
			}
			if c.n > 0 && b.Scheduler.Chunked && budget > 0 { // a chunk of the next
				next = append(next, cohort{n: 1, pre: c.pre + budget})
				pieces = append(pieces, piece{n: 1, tokens: budget})
				prefill += budget
				budget = 0
				c.n--
			}
			if c.n > 0 {
				next = append(next, c)
			}
		}
		if prefill == 0 && decodes == 0 { // cannot happen past checkServing's refusals; never loop
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
		xs := microBatches(l.PP, in, pieces, decodes)
		at := func(i int) float64 {
			if decodes > 0 {
				for j := range xs {
					xs[j].ctx = float64(context+i*decodes) / float64(decodes)
				}
			}
			return p.pipelined(s, b.Scheduler.Overlap, xs).Seconds()
		}
		total += sumAffine(at, k)
		r.Steps += k
		run, next = next, run // next's cohorts are the step's; run's buffer takes what stays
		next = next[:0]
		for _, c := range run {
			if c.decoding(in) && !c.fresh {
				c.gen += k
			}
			c.fresh = false
			if c.gen >= out {
				done += c.n
				resident -= c.n
				continue
			}
			next = append(next, c)
		}
		run, next = merge(next), run
	}
	r.Duration = seconds(total) // saturated: the steps' sum may pass a Duration
	r.Throughput = float64(b.Requests) * float64(out) / total
	return r, nil
}

// piece is n prompts' or chunks' tokens each of one step.
type piece struct{ n, tokens int }

// microBatches deals a step's work to pp micro-batches, whole requests
// to each: its prompt pieces round robin in their order (first come,
// first served) from the first, its decodes as evenly as whole requests
// go, the last micro-batches (which the prompts reach last) one more. A micro-batch's prompt tokens count as that
// share of one prompt of in tokens (mix.prefills); its decodes' mean
// context is the caller's.
func microBatches(pp, in int, pieces []piece, decodes int) []mix {
	xs := make([]mix, pp)
	tokens := make([]int, pp)
	next := 0 // the micro-batch the next piece goes to
	for _, c := range pieces {
		for j := range pp {
			k := c.n / pp
			if (j-next+pp)%pp < c.n%pp {
				k++
			}
			tokens[j] += k * c.tokens
		}
		next = (next + c.n) % pp
	}
	for j := range xs {
		xs[j] = mix{prefills: float64(tokens[j]) / float64(in), in: in, decodes: float64(decodes / pp), chunks: 1}
		if j >= pp-decodes%pp {
			xs[j].decodes++
		}
	}
	return xs
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
