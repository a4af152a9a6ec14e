// Package reqtrace reads production request traces: when each request
// arrived and how long its prompt and its answer were, as the serving
// systems that recorded them published them. It reads two formats,
// detected by content:
//
//   - Azure's LLM inference traces (CSV: TIMESTAMP, ContextTokens,
//     GeneratedTokens). TIMESTAMP is a wall-clock datetime with up to 9
//     fractional digits (Azure writes 7: 2023-11-16 18:15:46.6805900);
//     arrival times are relative to the first row.
//   - Mooncake's traces (JSON lines: timestamp in milliseconds from the
//     start, input_length, output_length, hash_ids). Each hash id names one
//     BlockTokens-token prefix block (512 in the published traces): equal
//     ids are a prefix whose KV a cache could reuse.
//
// Rows may share a timestamp with the row before (Mooncake's mostly do);
// a row strictly earlier than the one before is out of order and refused.
// A malformed row is one error naming the file, line, column and rule.
//
// The package holds the decisions (what a window of a trace is, its
// length distribution, what a prefix cache could skip) and none of the
// running: rankrun's executor replays a window as its workload.
package reqtrace

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Format is a trace's file format.
type Format string

// The formats read.
const (
	AzureCSV      Format = "azure-csv"
	MooncakeJSONL Format = "mooncake-jsonl"
)

// BlockTokens is the prefix-block size of Mooncake's hash ids, in tokens.
const BlockTokens = 512

// MaxLine is the longest line a trace may have, in bytes.
const MaxLine = 1 << 20

// MaxSpan is the longest a replayed window's arrivals may span (its
// times divided by the scale): 1e8 s, rankrun's bound on any workload's
// arrivals, far below what a time.Duration holds.
const MaxSpan = 1e8 * time.Second

// MaxTokens is the longest prompt or answer a row may claim, in tokens
// (longer is a malformed row, not a long request).
const MaxTokens = 10_000_000

// Request is one row of a trace.
type Request struct {
	At     time.Duration // arrival, from the first row's (both formats)
	Input  int           // prompt tokens (>= 1)
	Output int           // generated tokens (>= 1)
	Blocks []uint64      // prefix-block ids (Mooncake's hash_ids), nil where the format has none
}

// Trace is a whole trace file.
type Trace struct {
	Name     string // the file's path as given
	Format   Format
	Requests []Request // in arrival order, at least one
}

// HasPrefixes reports whether the trace carries prefix-block ids.
func (t *Trace) HasPrefixes() bool {
	for _, r := range t.Requests {
		if len(r.Blocks) > 0 {
			return true
		}
	}
	return false
}

// Window is a part of a trace: the rows that arrive in [From, From+Span)
// (Span 0: to the end), of which the first First (0: all).
type Window struct {
	From, Span time.Duration
	First      int
}

func (w Window) String() string {
	s := "from " + w.From.String()
	if w.Span > 0 {
		s += " for " + w.Span.String()
	} else {
		s += " to the end"
	}
	if w.First > 0 {
		s += fmt.Sprintf(", first %d", w.First)
	}
	return s
}

// Select returns the requests of t in w, their times relative to the
// window's first request. It errs when the window holds none, or fewer
// than First.
func (t *Trace) Select(w Window) ([]Request, error) {
	lo, _ := slices.BinarySearchFunc(t.Requests, w.From, func(r Request, at time.Duration) int { return cmp.Compare(r.At, at) })
	hi := len(t.Requests)
	if w.Span > 0 {
		hi, _ = slices.BinarySearchFunc(t.Requests, w.From+w.Span, func(r Request, at time.Duration) int { return cmp.Compare(r.At, at) })
	}
	if lo >= hi {
		return nil, fmt.Errorf("reqtrace: %s: the window %s holds no request (the trace spans %v)", t.Name, w, t.Span())
	}
	if w.First > 0 {
		if w.First > hi-lo {
			return nil, fmt.Errorf("reqtrace: %s: the window %s holds %d requests, fewer than the %d asked", t.Name, w, hi-lo, w.First)
		}
		hi = lo + w.First
	}
	out := slices.Clone(t.Requests[lo:hi])
	base := out[0].At
	for i := range out {
		out[i].At -= base
	}
	return out, nil
}

// Span is the time from the first request to the last.
func (t *Trace) Span() time.Duration {
	return t.Requests[len(t.Requests)-1].At - t.Requests[0].At
}

// Lengths is a set of requests' length distribution.
type Lengths struct {
	InputP50, InputP99   int
	OutputP50, OutputP99 int
	InputMax, OutputMax  int
}

// Measure returns reqs' length distribution (nearest-rank percentiles).
func Measure(reqs []Request) Lengths {
	in := make([]int, len(reqs))
	out := make([]int, len(reqs))
	for i, r := range reqs {
		in[i], out[i] = r.Input, r.Output
	}
	slices.Sort(in)
	slices.Sort(out)
	return Lengths{InputP50: rank(in, 0.50), InputP99: rank(in, 0.99), OutputP50: rank(out, 0.50), OutputP99: rank(out, 0.99),
		InputMax: rank(in, 1), OutputMax: rank(out, 1)}
}

// rank is the nearest-rank q-quantile of sorted s (0 for none).
func rank(s []int, q float64) int {
	if len(s) == 0 {
		return 0
	}
	i := int(q*float64(len(s))+0.999999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
