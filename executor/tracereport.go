package executor

import (
	"fmt"

	"github.com/rankrun/rankrun/reqtrace"
)

// TraceReport is what a run replayed of a production trace (Report.Trace).
type TraceReport struct {
	File     string  `json:"file"`
	Format   string  `json:"format"` // azure-csv, mooncake-jsonl
	Rows     int     `json:"rows"`   // the whole file's requests
	FromS    float64 `json:"window_from_s"`
	SpanS    float64 `json:"window_span_s,omitempty"` // 0: to the end
	Requests int     `json:"requests"`                // the window's first N, replayed
	// Pace: "recorded" (times divided by Scale) or "poisson" (the lengths
	// kept, arrivals drawn at PoissonRPS).
	Pace       string  `json:"pace"`
	Scale      float64 `json:"scale,omitempty"`
	PoissonRPS float64 `json:"poisson_rps,omitempty"`
	// ArrivalS is the replayed arrivals' span, first to last.
	ArrivalS   float64       `json:"arrival_span_s"`
	InputP50   int           `json:"input_p50"`
	InputP99   int           `json:"input_p99"`
	OutputP50  int           `json:"output_p50"`
	OutputP99  int           `json:"output_p99"`
	Clipped    int           `json:"clipped"`               // prompts clipped to ClipTokens
	ClipTokens int           `json:"clip_tokens,omitempty"` // the longest prompt both pools hold
	Prefix     *PrefixReport `json:"prefix,omitempty"`
}

// PrefixReport is what a prefix cache could skip of the replayed window's
// prefill, for a trace that carries prefix-block ids (Mooncake's
// hash_ids): an LRU over each CTX instance's pool, the window's requests
// routed as the run routes them (reqtrace.PrefixReuse). The run itself
// prefills every token.
type PrefixReport struct {
	BlockTokens int `json:"block_tokens"` // a prefix id's tokens (512)
	// PoolBlocks is a CTX instance's cache in prefix blocks: the tokens
	// its pool holds over BlockTokens.
	PoolBlocks     int     `json:"pool_prefix_blocks"`
	Instances      int     `json:"instances"`
	Share          float64 `json:"skippable_share"`           // of the window's prompt tokens, with a cache of the pool's size
	UnboundedShare float64 `json:"skippable_share_unbounded"` // with a cache that never evicts
}

// TraceSummary is cfg's trace replay report (nil without a trace).
func TraceSummary(cfg *Config) *TraceReport {
	w := cfg.Workload
	if w.Arrival.Kind != Traced {
		return nil
	}
	rp := w.Arrival.Trace
	reqs := w.traced()
	if reqs == nil {
		return nil
	}
	gen := w.Generate()
	// The window's own distribution, before clipping (Clipped says how
	// many the run clipped).
	whole, err := rp.Requests()
	if err != nil {
		return nil
	}
	l := reqtrace.Measure(whole)
	t := &TraceReport{File: rp.Trace.Name, Format: string(rp.Trace.Format), Rows: len(rp.Trace.Requests), FromS: rp.Window.From.Seconds(),
		SpanS: rp.Window.Span.Seconds(), Requests: len(reqs), Pace: "recorded", Scale: rp.Scale,
		ArrivalS: gen[len(gen)-1].At.Seconds(), InputP50: l.InputP50, InputP99: l.InputP99, OutputP50: l.OutputP50, OutputP99: l.OutputP99,
		Clipped: w.Clipped(), ClipTokens: w.MaxInput}
	if rp.Poisson > 0 {
		t.Pace, t.Scale, t.PoissonRPS = "poisson", 0, rp.Poisson
	}
	if rp.Trace.HasPrefixes() {
		// Tokens a CTX instance's pool holds: its rank 0's pool, which
		// holds a CP-th of each request's blocks.
		poolTokens := cfg.CtxBlocks * cfg.Model.TokensPerBlock * max(cfg.Ctx.CP, 1)
		p := &PrefixReport{BlockTokens: reqtrace.BlockTokens, PoolBlocks: poolTokens / reqtrace.BlockTokens, Instances: cfg.Ctx.DP}
		if p.PoolBlocks > 0 {
			p.Share = reqtrace.PrefixReuse(reqs, p.Instances, p.PoolBlocks, p.BlockTokens).Share()
		}
		p.UnboundedShare = reqtrace.PrefixReuse(reqs, p.Instances, 0, p.BlockTokens).Share()
		t.Prefix = p
	}
	return t
}

// workloadLine is the report's workload line.
func workloadLine(cfg *Config, t *TraceReport) string {
	w := cfg.Workload
	if t == nil {
		return fmt.Sprintf("%d requests, %d input tokens, %d output tokens, %s", w.Requests, w.InputTokens, w.OutputTokens, w.Arrival)
	}
	win := "trace"
	if t.FromS > 0 || t.SpanS > 0 {
		win = fmt.Sprintf("window from %gs", t.FromS)
		if t.SpanS > 0 {
			win += fmt.Sprintf(" for %gs", t.SpanS)
		}
	}
	pace := fmt.Sprintf("at the recorded times x%g, over %.1f s", t.Scale, t.ArrivalS)
	if t.Pace == "poisson" {
		pace = fmt.Sprintf("the lengths with Poisson arrivals at %g/s, over %.1f s", t.PoissonRPS, t.ArrivalS)
	}
	s := fmt.Sprintf("trace %s (%s, %d requests): the first %d of the %s, %s; input p50 %d p99 %d, output p50 %d p99 %d tokens",
		t.File, t.Format, t.Rows, t.Requests, win, pace, t.InputP50, t.InputP99, t.OutputP50, t.OutputP99)
	if t.Clipped > 0 {
		s += fmt.Sprintf("; %d prompts clipped to %d tokens (what the pools hold)", t.Clipped, t.ClipTokens)
	}
	if p := t.Prefix; p != nil {
		s += fmt.Sprintf("; prefix reuse: an LRU of each CTX instance's pool (%d blocks of %d tokens) could skip %.1f%% of the prefill (%.1f%% unbounded; the run prefills all)",
			p.PoolBlocks, p.BlockTokens, 100*p.Share, 100*p.UnboundedShare)
	}
	return s
}
