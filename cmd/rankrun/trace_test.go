package main

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireNested fails unless the complete ("X") events of every track
// nest properly (any two are disjoint or one holds the other, as trace
// viewers draw them) and every async begin has its end, no earlier.
func requireNested(t *testing.T, events []map[string]any) {
	t.Helper()
	type span struct {
		from, to float64
		name     string
	}
	const eps = 1e-3 // microseconds: float rounding of ns timestamps
	tracks := map[[2]float64][]span{}
	open := map[string]float64{}
	for i, ev := range events {
		ph, _ := ev["ph"].(string)
		ts, _ := ev["ts"].(float64)
		switch ph {
		case "X":
			key := [2]float64{ev["pid"].(float64), ev["tid"].(float64)}
			tracks[key] = append(tracks[key], span{ts, ts + ev["dur"].(float64), ev["name"].(string)})
		case "b", "e":
			id, _ := ev["id"].(string)
			require.NotEmpty(t, id, "event %d: async without id", i)
			key := ev["cat"].(string) + "/" + id
			if ph == "b" {
				_, dup := open[key]
				require.False(t, dup, "event %d: async %s begun twice", i, key)
				open[key] = ts
				continue
			}
			from, ok := open[key]
			require.True(t, ok, "event %d: async %s ends without a begin", i, key)
			require.GreaterOrEqual(t, ts, from, "event %d: async %s ends before it begins", i, key)
			delete(open, key)
		}
	}
	require.Empty(t, open, "async events never ended")
	for key, spans := range tracks {
		slices.SortStableFunc(spans, func(a, b span) int {
			return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(b.to, a.to))
		})
		var stack []span
		for _, s := range spans {
			for len(stack) > 0 && stack[len(stack)-1].to <= s.from+eps {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 {
				top := stack[len(stack)-1]
				require.LessOrEqual(t, s.to, top.to+eps, "track %v: %q [%.3f, %.3f] partially overlaps %q [%.3f, %.3f]",
					key, s.name, s.from, s.to, top.name, top.from, top.to)
			}
			stack = append(stack, s)
		}
	}
}

func readTrace(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(b, &tr), "the trace is valid JSON")
	return tr.TraceEvents
}

// The run: 64 requests, the default layouts. Transfers crossed
// iteration spans on the rank's track (74 of 565 complete events
// overlapped); they are async events now.
func TestRunTraceNests(t *testing.T) {
	for _, mode := range []string{"async", "sync"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trace.json")
			code, _, errOut := cli(t, "run", "--requests", "64", "--transfer", mode, "--decode-per-step", "200us", "--trace", path)
			require.Equal(t, 0, code, errOut)
			events := readTrace(t, path)
			async := 0
			for _, ev := range events {
				if ev["ph"] == "b" {
					async++
				}
			}
			require.Positive(t, async, "transfers are async events")
			requireNested(t, events)
		})
	}
}

// A run that fails still writes a valid trace of what happened up to it.
func TestRunErrorWritesTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	code, _, errOut := cli(t, "run", "--requests", "8", "--fault", "exit@gen:1,req=3", "--trace", path)
	require.Equal(t, 1, code, errOut)
	events := readTrace(t, path)
	x := 0
	for _, ev := range events {
		if ev["ph"] == "X" {
			x++
		}
	}
	require.Positive(t, x, "the ranks' events up to the error")
	requireNested(t, events)
}
