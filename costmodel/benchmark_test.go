package costmodel

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// referenceRun is a dumb Benchmark: every request its own state, one step
// at a time, no cohorts and no closed-form stretches. It shares only the
// step's price (Placement.step) with the code under test.
func referenceRun(t testing.TB, p Placement, l topology.Layout, b Benchmark) Run {
	t.Helper()
	maxBatch, maxTokens := b.Scheduler.Limits()
	s := p.side(l, 0)
	slots := min(int(math.Floor(s.kvTokens()/float64(b.In+b.Out))), maxBatch)
	type req struct{ pre, gen int }
	var live []*req
	next, done := 0, 0
	var total float64
	var r Run
	for done < b.Requests {
		require.Less(t, r.Steps, 1_000_000, "the reference does not end")
		for len(live) < slots && next < b.Requests {
			live = append(live, &req{})
			next++
		}
		r.Resident = max(r.Resident, len(live))
		var decoding []*req
		var context int
		for _, q := range live {
			if q.pre == b.In {
				decoding = append(decoding, q)
				context += b.In + q.gen
			}
		}
		budget := maxTokens - len(decoding)
		prefill := 0
		for _, q := range live {
			if q.pre == b.In || budget <= 0 {
				continue
			}
			take := b.In - q.pre
			if take > budget {
				if !b.Scheduler.Chunked {
					break // first come, first served: a whole prompt or nothing
				}
				take = budget
			}
			q.pre += take
			prefill += take
			budget -= take
			if q.pre == b.In {
				q.gen = -1 // its prompt ends this step: no decode in it
			}
		}
		x := mix{prefills: float64(prefill) / float64(b.In) / float64(l.PP), in: b.In, decodes: float64(len(decoding)) / float64(l.PP), chunks: 1}
		if len(decoding) > 0 {
			x.ctx = float64(context) / float64(len(decoding))
		}
		total += p.step(s, b.Scheduler.Overlap, x).Seconds()
		r.Steps++
		kept := live[:0]
		for _, q := range live {
			switch {
			case q.gen == -1:
				q.gen = 1 // the prompt's last step samples its first token
			case q.pre == b.In:
				q.gen++
			}
			if q.pre == b.In && q.gen >= b.Out {
				done++
				continue
			}
			kept = append(kept, q)
		}
		live = kept
	}
	r.Duration = time.Duration(math.Round(total * 1e9))
	r.Throughput = float64(b.Requests*b.Out) / total
	return r
}

// Benchmark against the request-by-request reference: short and long
// prompts, chunked or not, budgets that split waves, KV-bound and
// max_batch-bound, TP and PP, overlap on and off. The cohorts and the
// closed-form stretches change nothing but the time it takes.
func TestBenchmarkMatchesStepwise(t *testing.T) {
	h100, h200 := Hardwares["h100-nvlink-ib400"], Hardwares["h200-nvlink-ib400"]
	m8, m70 := fp8(Models["llama-3-8b"]), fp8(Models["llama-3-70b"])
	tp := func(n, pp int) topology.Layout { return topology.Layout{TP: n, PP: pp, CP: 1, DP: 1} }
	for _, c := range []struct {
		name string
		p    Placement
		l    topology.Layout
		b    Benchmark
	}{
		{"one wave, whole prompts", Placement{Model: m8, HW: h100}, tp(1, 1), Benchmark{Requests: 16, In: 128, Out: 40, Scheduler: Scheduler{MaxBatch: 16}}},
		{"waves under max_batch", Placement{Model: m8, HW: h100}, tp(1, 1), Benchmark{Requests: 50, In: 300, Out: 64, Scheduler: Scheduler{MaxBatch: 12, MaxTokens: 1024}}},
		{"chunked long prompts", Placement{Model: m8, HW: h200}, tp(1, 1), Benchmark{Requests: 20, In: 5000, Out: 30, Scheduler: Scheduler{MaxBatch: 8, MaxTokens: 2048, Chunked: true}}},
		{"KV-bound, overlap", Placement{Model: m70, HW: h100}, tp(2, 1), Benchmark{Requests: 300, In: 4000, Out: 2000, Scheduler: Scheduler{MaxTokens: 8192, Overlap: true}}},
		{"PP micro-batches", Placement{Model: m70, HW: h200}, tp(1, 2), Benchmark{Requests: 40, In: 1000, Out: 50, Scheduler: Scheduler{MaxBatch: 32, MaxTokens: 4096}}},
		{"one token out", Placement{Model: m8, HW: h100}, tp(1, 1), Benchmark{Requests: 30, In: 700, Out: 1, Scheduler: Scheduler{MaxBatch: 8, MaxTokens: 2048}}},
	} {
		got, err := c.p.Benchmark(c.l, c.b)
		require.NoError(t, err, c.name)
		want := referenceRun(t, c.p, c.l, c.b)
		assert.Equal(t, want.Steps, got.Steps, "%s: steps", c.name)
		assert.Equal(t, want.Resident, got.Resident, "%s: resident", c.name)
		// Each step is priced to the nanosecond: a stretch summed in closed
		// form may differ from its steps' sum by their rounding.
		slack := float64(want.Steps) + 1
		assert.InDelta(t, want.Duration, got.Duration, slack, "%s: duration", c.name)
		assert.InDelta(t, want.Throughput, got.Throughput, slack/float64(want.Duration)*want.Throughput, "%s: throughput", c.name)
	}
}

// Waves by hand (Llama-3-8B FP8 on one H100, max_batch 8): 24 requests of
// 128 in / 16 out go in three waves of 8; each wave prefills in one step
// (1,024 tokens fit the budget), which samples each request's first
// token, and decodes the other 15 in 15 steps at contexts 129 to 143.
func TestBenchmarkWaves(t *testing.T) {
	p := Placement{Model: fp8(Models["llama-3-8b"]), HW: Hardwares["h100-nvlink-ib400"]}
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	r, err := p.Benchmark(l, Benchmark{Requests: 24, In: 128, Out: 16, Scheduler: Scheduler{MaxBatch: 8}})
	require.NoError(t, err)
	assert.Equal(t, 48, r.Steps)
	assert.Equal(t, 8, r.Resident)
	s := p.side(l, 0)
	wave := p.step(s, false, mix{prefills: 8, in: 128, chunks: 1})
	for i := range 15 {
		wave += p.step(s, false, mix{in: 128, decodes: 8, ctx: float64(129 + i), chunks: 1})
	}
	assert.InDelta(t, 3*wave, r.Duration, 3, "three identical waves")
	assert.InDelta(t, 24*16/(3*wave).Seconds(), r.Throughput, 1e-9*r.Throughput)
}

// The KV cache holds the resident requests (GUARANTEED_NO_EVICT: a whole
// sequence's KV at admission), and a few waves pay their ramp and tail:
// the finite run is slower than the steady state Offline prices.
func TestBenchmarkKVBound(t *testing.T) {
	p := Placement{Model: fp8(Models["llama-3-70b"]), HW: Hardwares["h100-nvlink-ib400"]}
	l := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	st, err := p.Offline(l, Scheduler{}, 2048, 2048)
	require.NoError(t, err)
	require.Equal(t, "kv", st.Bound)
	r, err := p.Benchmark(l, Benchmark{Requests: 3 * int(st.Batch), In: 2048, Out: 2048})
	require.NoError(t, err)
	assert.Equal(t, int(st.Batch), r.Resident)
	assert.Less(t, r.Throughput, st.Throughput)
	assert.Greater(t, r.Throughput, 0.8*st.Throughput)
}

// Overlap: the host's cost hides behind the GPU's, or shows when it is
// the longer; without it the two add.
func TestSchedulerOverlap(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	b := Benchmark{Requests: 4, In: 64, Out: 8, Scheduler: Scheduler{MaxBatch: 4}}
	gpuOnly := hw
	gpuOnly.StepOverhead = 0
	base, err := Placement{Model: fp8(Models["llama-3-8b"]), HW: gpuOnly}.Benchmark(l, b)
	require.NoError(t, err)
	for _, host := range []time.Duration{time.Microsecond, time.Second} {
		h := hw
		h.StepOverhead = host
		p := Placement{Model: fp8(Models["llama-3-8b"]), HW: h}
		plain, err := p.Benchmark(l, b)
		require.NoError(t, err)
		assert.InDelta(t, base.Duration+time.Duration(base.Steps)*host, plain.Duration, 2, "host %v: added", host)
		b.Scheduler.Overlap = true
		over, err := p.Benchmark(l, b)
		b.Scheduler.Overlap = false
		require.NoError(t, err)
		if host == time.Second {
			assert.InDelta(t, time.Duration(base.Steps)*host, over.Duration, 2, "a host slower than every step paces them")
		} else {
			assert.InDelta(t, base.Duration, over.Duration, 2, "a quick host hides")
		}
	}
	// Offline's step too.
	p := Placement{Model: fp8(Models["llama-3-8b"]), HW: hw}
	plain, err := p.Offline(l, Scheduler{}, 1000, 1000)
	require.NoError(t, err)
	over, err := p.Offline(l, Scheduler{Overlap: true}, 1000, 1000)
	require.NoError(t, err)
	assert.Equal(t, plain.Step-hw.StepOverhead, over.Step)
	assert.Equal(t, "max_batch=2048 max_tokens=8192 chunked=false overlap=true", Scheduler{Overlap: true}.String())
}

// A benchmark refuses what Offline refuses, and what it does not model,
// naming the field.
func TestBenchmarkRefusals(t *testing.T) {
	p := Placement{Model: fp8(Models["llama-3-8b"]), HW: Hardwares["h100-nvlink-ib400"]}
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	for _, c := range []struct {
		l    topology.Layout
		b    Benchmark
		want string
	}{
		{l, Benchmark{Requests: 0, In: 10, Out: 10}, "requests = 0"},
		{topology.Layout{TP: 1, PP: 1, CP: 1, DP: 2}, Benchmark{Requests: 1, In: 10, Out: 10}, "dp = 2"},
		{l, Benchmark{Requests: 1, In: 10000, Out: 10}, "needs chunked prefill"},
		{l, Benchmark{Requests: 1, In: 0, Out: 10}, "in = 0"},
	} {
		_, err := p.Benchmark(c.l, c.b)
		require.Error(t, err, c.want)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), c.want)
		assert.NotContains(t, err.Error(), "\n")
	}
}

// sumAffine is the sum of its terms for convex piecewise-linear ones:
// affine, a kink anywhere, two kinks.
func TestSumAffine(t *testing.T) {
	for _, f := range []func(int) float64{
		func(i int) float64 { return 3 + 0.5*float64(i) },
		func(i int) float64 { return math.Max(10, float64(i)) },
		func(i int) float64 {
			return math.Max(7.25, 0.3*float64(i)) + math.Max(2, 0.01*float64(i*i)/float64(i+1))
		},
		func(i int) float64 { return math.Max(math.Max(50-float64(i), 20), float64(i)-30) },
	} {
		for _, n := range []int{1, 2, 3, 7, 64, 1000} {
			var want float64
			for i := range n {
				want += f(i)
			}
			assert.InDelta(t, want, sumAffine(f, n), 1e-9*want, "n=%d", n)
		}
	}
}

// trtllm-bench's settings heuristic, worked by hand from
// tensorrt_llm/bench/build/tuning.py (GiB throughout).
func TestTRTLLMBench(t *testing.T) {
	h100, h200 := Hardwares["h100-nvlink-ib400"], Hardwares["h200-nvlink-ib400"]
	tp := func(n, pp int) topology.Layout { return topology.Layout{TP: n, PP: pp, CP: 1, DP: 1} }
	for _, c := range []struct {
		name    string
		m       Model
		hw      Hardware
		l       topology.Layout
		in, out int
		want    Scheduler
	}{
		// Llama-3-8B FP8 on one H100: 74.51 GiB less 7.48 GiB of weights,
		// x 0.9 = 60.33 GiB; 64 KiB a token, 4224 a request: 234 requests;
		// under 256, up to a multiple of 32: 256. Tokens 234 x (1 +
		// 128/4096) = 241, under 4096: at least 2048.
		{"8b 128/4096", fp8(Models["llama-3-8b"]), h100, tp(1, 1), 128, 4096, Scheduler{MaxBatch: 256, MaxTokens: 2048, Overlap: true}},
		// 128/128: 3,860 requests, over 1024: up to a multiple of 256,
		// 4096; tokens 3860 x 2 = 7721, under 8192: up to 512, 8192.
		{"8b 128/128", fp8(Models["llama-3-8b"]), h100, tp(1, 1), 128, 128, Scheduler{MaxBatch: 4096, MaxTokens: 8192, Overlap: true}},
		// 20000/2000: 44 requests: at least 64; tokens 44 x 11 = 486 ->
		// 2048, but chunked prefill is off: 20000 + 64.
		{"8b 20000/2000", fp8(Models["llama-3-8b"]), h100, tp(1, 1), 20000, 2000, Scheduler{MaxBatch: 64, MaxTokens: 20064, Overlap: true}},
		// Llama-3.1-405B FP8 on 8 H200: 8 x 131.32 - 377.26 (405.9e9
		// bytes) = 673.29 GiB, x 0.9 = 605.96; 8 KV heads at 126 layers,
		// 252 KiB a token, 2000 a request: 1,260 requests, over 1024: 1280;
		// tokens 1260 x 2 = 2520 -> 2560.
		{"405b 1000/1000", fp8(Models["llama-3.1-405b"]), h200, tp(8, 1), 1000, 1000, Scheduler{MaxBatch: 1280, MaxTokens: 2560, Overlap: true}},
		// Under PP both limits are a micro-batch's: twice over on PP 2.
		{"405b pp2", fp8(Models["llama-3.1-405b"]), h200, tp(4, 2), 1000, 1000, Scheduler{MaxBatch: 2 * 640, MaxTokens: 2 * 2048, Overlap: true}},
	} {
		assert.Equal(t, c.want, TRTLLMBench(c.m, c.hw, c.l, c.in, c.out), c.name)
	}
}

// BenchmarkRun is one published cell's finite run (Llama-3-8B FP8 on one
// H100, 128 in / 4096 out, 1,500 requests under trtllm-bench's limits:
// about 27,000 steps) priced with its decode stretches in closed form,
// beside the request-by-request reference pricing every step: what the
// closed form buys rankrun validate.
func BenchmarkRun(b *testing.B) {
	m := fp8(Models["llama-3-8b"])
	p := Placement{Model: m, HW: Hardwares["h100-nvlink-ib400"]}
	l := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	run := Benchmark{Requests: 1500, In: 128, Out: 4096, Scheduler: TRTLLMBench(m, p.HW, l, 128, 4096)}
	b.Run("closed-form", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Benchmark(l, run); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stepwise", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			referenceRun(b, p, l, run)
		}
	})
}
