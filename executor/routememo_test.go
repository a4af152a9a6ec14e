package executor

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/request"
)

// memoSpans is a DP index's step: n prompts of 40 tokens from request id.
func memoSpans(id, n int) []dispatchSpan {
	spans := make([]dispatchSpan, n)
	for i := range spans {
		spans[i] = dispatchSpan{ID: request.ID(id + i), Pos: 0, N: 40, DP: id % 3}
	}
	return spans
}

// expand is the tokens of spans that f picks, one by one.
func expand(spans []dispatchSpan, f cpFilter) []DispatchToken {
	var toks []DispatchToken
	for _, sp := range spans {
		for pos := sp.Pos; pos < sp.Pos+sp.N; pos++ {
			if f.holds(pos) {
				toks = append(toks, DispatchToken{ID: sp.ID, Pos: pos, DP: sp.DP})
			}
		}
	}
	return toks
}

// A list of spans routes as its tokens, those the CP filter picks, do one
// by one (SampledRouteCounts), for grouped and ungrouped routings, with
// and without CP, spans of one token and of many.
func TestSpansRouteAsTheirTokens(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, r := range []Routing{{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}, {Experts: 64, TopK: 6}} {
		for _, f := range []cpFilter{{}, {tpb: 16, cp: 1}, {tpb: 16, cp: 4, rem: 0}, {tpb: 16, cp: 4, rem: 3}, {tpb: 8, cp: 3, rem: 1}} {
			for range 20 {
				spans := make([]dispatchSpan, 1+rng.IntN(6))
				for i := range spans {
					spans[i] = dispatchSpan{ID: request.ID(1 + rng.IntN(1000)), Pos: rng.IntN(300), N: 1 + rng.IntN(70), DP: rng.IntN(4)}
				}
				for _, parts := range []int{1, 4, 8} {
					got, want := make([]int64, parts), make([]int64, parts)
					var b routeBufs
					require.NoError(t, b.sampledSpans(r, spans, f, got))
					require.NoError(t, SampledRouteCounts(r, expand(spans, f), want))
					require.Equal(t, want, got, "%+v %+v parts %d spans %+v", r, f, parts, spans)
				}
			}
		}
	}
}

// wantRows is a step's counts over DP indices dps, token by token.
func wantRows(t *testing.T, r Routing, spans []dispatchSpan, f cpFilter, dps []int) stepRows {
	rows := make(stepRows, len(dps))
	for i, dp := range dps {
		rows[i] = make([]int64, len(dps))
		var mine []dispatchSpan
		for _, sp := range spans {
			if sp.DP == dp {
				mine = append(mine, sp)
			}
		}
		require.NoError(t, SampledRouteCounts(r, expand(mine, f), rows[i]))
	}
	return rows
}

// The members of a group take the step's counts of the first that
// computed them, which are what its tokens route to, a row for each
// member's DP index (TP siblings share theirs); a step that differs by one
// token (a member whose batch differs), or whose CP index picks other
// tokens, gets its own; an entry goes once every member took it, and
// steps no other member takes never pile up.
func TestRouteMemo(t *testing.T) {
	r := Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}
	m := newRouteMemo()
	var b routeBufs
	dps := []int{0, 1, 1, 2} // member 1 and 2 are TP siblings
	a := append(memoSpans(3, 4), memoSpans(1, 3)...)
	for i := range a {
		a[i].DP = i % 3
	}
	for member := range 4 {
		var own stepRows
		rows, err := m.step(r, a, cpFilter{}, dps, &own, &b)
		require.NoError(t, err)
		require.Equal(t, wantRows(t, r, a, cpFilter{}, dps), rows, "member %d", member)
		require.NotZero(t, rows[1][0]+rows[1][1]+rows[1][2]+rows[1][3], "the test needs tokens on DP 1")
		if member < 3 {
			require.Len(t, m.entries, 1, "the step waits for the members still to take it")
		}
	}
	require.Empty(t, m.entries, "every member took it")

	// One token apart: its own counts, not the first step's.
	other := slices.Clone(a)
	other[5].N++
	var own stepRows
	_, err := m.step(r, a, cpFilter{}, dps, &own, &b)
	require.NoError(t, err)
	rows, err := m.step(r, other, cpFilter{}, dps, &own, &b)
	require.NoError(t, err)
	require.Equal(t, wantRows(t, r, other, cpFilter{}, dps), rows)
	require.NotEqual(t, wantRows(t, r, a, cpFilter{}, dps), rows, "the test needs steps whose counts differ")
	// Another CP index: other tokens of the same spans.
	cp := cpFilter{tpb: 8, cp: 2, rem: 1}
	rows, err = m.step(r, a, cp, dps, &own, &b)
	require.NoError(t, err)
	require.Equal(t, wantRows(t, r, a, cp, dps), rows)
	require.Len(t, m.entries, 3)

	// Without a memo, or alone in its group, a rank computes into its own.
	rows, err = (*routeMemo)(nil).step(r, a, cpFilter{}, dps, &own, &b)
	require.NoError(t, err)
	require.Equal(t, wantRows(t, r, a, cpFilter{}, dps), rows)

	// Steps no other member takes: bounded.
	for id := range routeMemoCap + 10 {
		_, err := m.step(r, memoSpans(id+10, 1), cpFilter{}, dps, &own, &b)
		require.NoError(t, err)
	}
	require.Len(t, m.entries, routeMemoCap)

	// In-process ranks take steps at once (run under -race).
	m = newRouteMemo()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var b routeBufs
			var own stepRows
			for id := range 20 {
				spans := memoSpans(id, 3)
				rows, err := m.step(r, spans, cpFilter{}, dps, &own, &b)
				if err != nil {
					t.Error(err)
				}
				for i, dp := range dps {
					var mine []dispatchSpan
					for _, sp := range spans {
						if sp.DP == dp {
							mine = append(mine, sp)
						}
					}
					want := make([]int64, len(dps))
					if err := SampledRouteCounts(r, expand(mine, cpFilter{}), want); err != nil || !slices.Equal(rows[i], want) {
						t.Errorf("step %d member %d: counts %v, SampledRouteCounts %v (%v)", id, i, rows[i], want, err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, m.entries)
}
