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
// at a time, no cohorts and no closed-form stretches, its micro-batches
// dealt request by request. It shares only the price of a step's
// micro-batches (Placement.pipelined, tested on its own in
// TestPipelined) with the code under test.
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
		// Each prompt's tokens this step go to the next micro-batch in
		// turn from the first; the decodes split as evenly as whole
		// requests go, from the last.
		prompts, turn := make([]int, l.PP), 0
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
			prompts[turn%l.PP] += take
			turn++
			budget -= take
			if q.pre == b.In {
				q.gen = -1 // its prompt ends this step: no decode in it
			}
		}
		xs := make([]mix, l.PP)
		for j := range xs {
			xs[j] = mix{prefills: float64(prompts[j]) / float64(b.In), in: b.In, chunks: 1}
		}
		for i := range decoding {
			xs[l.PP-1-i%l.PP].decodes++
		}
		if len(decoding) > 0 {
			for j := range xs {
				xs[j].ctx = float64(context) / float64(len(decoding))
			}
		}
		total += p.pipelined(s, b.Scheduler.Overlap, xs).Seconds()
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
		{"decodes crowd out prompts", Placement{Model: m8, HW: h100}, tp(1, 1), Benchmark{Requests: 80, In: 1000, Out: 300, Scheduler: Scheduler{MaxBatch: 32, MaxTokens: 1024}}},
		{"PP 4, one prompt a step", Placement{Model: m70, HW: h200}, tp(1, 4), Benchmark{Requests: 9, In: 3000, Out: 20, Scheduler: Scheduler{MaxBatch: 6, MaxTokens: 3006, Chunked: true, Overlap: true}}},
		{"a budget under one request, chunked", Placement{Model: m8, HW: h100}, tp(1, 1), Benchmark{Requests: 10, In: 5000, Out: 1, Scheduler: Scheduler{MaxTokens: 2048, Chunked: true}}},
	} {
		got, err := c.p.Benchmark(c.l, c.b)
		require.NoError(t, err, c.name)
		want := referenceRun(t, c.p, c.l, c.b)
		assert.Equal(t, want.Steps, got.Steps, "%s: steps", c.name)
		assert.Equal(t, want.Resident, got.Resident, "%s: resident", c.name)
		// Each stage is priced to the nanosecond, a step of PP stages to
		// PP of them: a stretch summed in closed form may differ from its
		// steps' sum by their rounding.
		slack := float64(want.Steps*(c.l.PP+1)) + 1
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

// Under PP a lone prompt walks every stage: one request of 8,000 tokens
// on Llama-3-70B FP8 (two H100s a stage) takes its whole prefill at PP 4
// as at PP 1, not a quarter of it, and what the runtime's prefill of it on
// the same layout takes.
func TestBenchmarkPromptWalksEveryStage(t *testing.T) {
	hw := Hardwares["h100-nvlink-ib400"]
	m := fp8(Models["llama-3-70b"])
	b := Benchmark{Requests: 1, In: 8000, Out: 1}
	one := func(pp int) (Run, time.Duration) {
		l := topology.Layout{TP: 2, PP: pp, CP: 1, DP: 1}
		p := Placement{Model: m, HW: hw, Ctx: l, Gen: l}
		r, err := p.Benchmark(l, b)
		require.NoError(t, err)
		require.Equal(t, 1, r.Steps)
		return r, p.Prefill([]Seq{{Tokens: 8000}})
	}
	r1, _ := one(1)
	r4, prefill4 := one(4)
	assert.Greater(t, r4.Duration, r1.Duration*9/10, "PP 4: %v against PP 1's %v", r4.Duration, r1.Duration)
	assert.InDelta(t, float64(prefill4), float64(r4.Duration), 0.02*float64(prefill4), "the runtime's prefill on PP 4")
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
		{l, Benchmark{Requests: 1, In: 4_000_000, Out: 10, Scheduler: Scheduler{Chunked: true}}, "holds the KV of no request of 4000010 tokens"},
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
// tensorrt_llm/bench/build/tuning.py (GiB throughout; the GPUs' memory as
// NVML reports it: 79.65 GiB an H100, 140.40 an H200).
func TestTRTLLMBench(t *testing.T) {
	h100, h200 := Hardwares["h100-nvlink-ib400"], Hardwares["h200-nvlink-ib400"]
	tp := func(n, pp int) topology.Layout { return topology.Layout{TP: n, PP: pp, CP: 1, DP: 1} }
	m8 := fp8(Models["llama-3-8b"])
	fewKV := m8 // two KV heads: under TP 4 each rank still holds one of them
	fewKV.Name, fewKV.KVHeads = "llama-3-8b-kv2", 2
	for _, c := range []struct {
		name    string
		m       Model
		hw      Hardware
		l       topology.Layout
		in, out int
		want    Scheduler
	}{
		// Llama-3-8B FP8 on one H100: 79.65 GiB less 7.48 GiB of weights,
		// x 0.9 = 64.95 GiB; 64 KiB a token, 4224 a request: 251.9
		// requests; under 256, up to a multiple of 32: 256. Tokens 251.9 x
		// (1 + 128/4096) = 260, under 4096: at least 2048.
		{"8b 128/4096", m8, h100, tp(1, 1), 128, 4096, Scheduler{MaxBatch: 256, MaxTokens: 2048, Overlap: true}},
		// 128/128: 4,157 requests, capped at 4096 (over 1024: to a multiple
		// of 256, 4096); tokens 4096 x 2 = 8192, at 8192: to 1024, 8192.
		{"8b 128/128", m8, h100, tp(1, 1), 128, 128, Scheduler{MaxBatch: 4096, MaxTokens: 8192, Overlap: true}},
		// 20000/2000: 48.4 requests: at least 64; tokens 48.4 x 11 = 532
		// -> 2048, but chunked prefill is off: 20000 + 64.
		{"8b 20000/2000", m8, h100, tp(1, 1), 20000, 2000, Scheduler{MaxBatch: 64, MaxTokens: 20064, Overlap: true}},
		// On one H200 at 2048/16: 132.92 GiB x 0.9 / (64 KiB x 2064) =
		// 949.6 requests, under 1024: to 128, 1024; tokens 949.6 x 129 =
		// 122,500, capped at 32768 (over 8192: to 1024, 32768).
		{"8b 2048/16", m8, h200, tp(1, 1), 2048, 16, Scheduler{MaxBatch: 1024, MaxTokens: 32768, Overlap: true}},
		// Two KV heads on TP 4: max(TP, KV heads) = 4 heads, 32 KiB a token;
		// 4 x 79.65 - 7.29 GiB = 311.3 x 0.9 = 280.2 GiB over 4224 tokens:
		// 2,173 requests -> 2304; tokens 2,241 -> 2304, but at least 128 +
		// 2304 = 2432.
		{"kv heads under TP", fewKV, h100, tp(4, 1), 128, 4096, Scheduler{MaxBatch: 2304, MaxTokens: 2432, Overlap: true}},
		// Llama-3.1-405B FP8 on 8 H200: 8 x 140.40 - 377.93 (405.8e9
		// bytes) = 745.28 GiB, x 0.9 = 670.75; 8 KV heads at 126 layers,
		// 252 KiB a token, 2000 a request: 1,395.5 requests, over 1024:
		// 1536; tokens 1395.5 x 2 = 2791 -> 2816.
		{"405b 1000/1000", fp8(Models["llama-3.1-405b"]), h200, tp(8, 1), 1000, 1000, Scheduler{MaxBatch: 1536, MaxTokens: 2816, Overlap: true}},
		// Under PP both limits are a micro-batch's: 1395.5 / 2 = 697.8 ->
		// 768; tokens 1395.5 -> 2048 (above 1000 + 768); twice over on PP 2.
		{"405b pp2", fp8(Models["llama-3.1-405b"]), h200, tp(4, 2), 1000, 1000, Scheduler{MaxBatch: 2 * 768, MaxTokens: 2 * 2048, Overlap: true}},
	} {
		got, err := TRTLLMBench(c.m, c.hw, c.l, c.in, c.out)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	// No request fits its estimate: trtllm-bench refuses, and so does this.
	_, err := TRTLLMBench(fp8(Models["llama-3.1-405b"]), h100, tp(8, 1), 500000, 500000)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "holds no request of 1000000 tokens")
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
	sch, err := TRTLLMBench(m, p.HW, l, 128, 4096)
	if err != nil {
		b.Fatal(err)
	}
	run := Benchmark{Requests: 1500, In: 128, Out: 4096, Scheduler: sch}
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

// pipelined by hand: a lone prompt in the first of four micro-batches
// walks every stage and every send with its own tokens (the empty ones
// cost nothing); eight alike micro-batches on PP 8 (Llama-3.1-405B's 126
// layers split 16/15) are paced by a 16-layer stage's round, longer than
// a trip; unequal ones by the heaviest's trip.
func TestPipelined(t *testing.T) {
	hw := Hardwares["h200-nvlink-ib400"]
	m := fp8(Models["llama-3.1-405b"])
	trip := func(s side, x mix) time.Duration {
		var d time.Duration
		for pp := range s.l.PP {
			d += s.mixedStage(pp, x)
			if pp+1 < s.l.PP {
				d += s.link(0, pp).Time(int(math.Ceil(x.tokens())) * m.Hidden * m.ActBytes)
			}
		}
		return d
	}
	p := Placement{Model: m, HW: hw}
	s4 := p.side(topology.Layout{TP: 2, PP: 4, CP: 1, DP: 1}, 0)
	prompt, decode := mix{prefills: 1, in: 3000, chunks: 1}, mix{in: 3000, decodes: 2, ctx: 3000, chunks: 1}
	assert.Equal(t, trip(s4, prompt)+hw.StepOverhead, p.pipelined(s4, false, []mix{prompt, {}, {}, {}}))
	// Beside a small decode micro-batch the prompt's trip still paces the
	// step, its sends at its own 3,000 tokens.
	require.Greater(t, trip(s4, prompt), trip(s4, decode))
	assert.Equal(t, trip(s4, prompt), p.pipelined(s4, true, []mix{prompt, decode, {}, {}}), "overlap: the host's 2.36 ms hide")

	s8 := p.side(topology.Layout{TP: 1, PP: 8, CP: 1, DP: 1}, 0)
	x := mix{in: 1000, decodes: 100, ctx: 1500, chunks: 1}
	xs := []mix{x, x, x, x, x, x, x, x}
	round := 8 * s8.mixedStage(0, x)
	require.Greater(t, round, trip(s8, x), "the precondition: a 16-layer stage's round is longer than a trip")
	assert.Equal(t, round+hw.StepOverhead, p.pipelined(s8, false, xs))
	assert.Equal(t, p.step(s8, false, x), p.pipelined(s8, false, xs), "alike micro-batches: Offline's step")
	heavy := x
	heavy.decodes = 700
	xs[3] = heavy
	var round0 time.Duration
	for j := range xs {
		round0 += s8.mixedStage(0, xs[j])
	}
	want := max(round0, trip(s8, heavy))
	assert.Equal(t, want+hw.StepOverhead, p.pipelined(s8, false, xs))
}
