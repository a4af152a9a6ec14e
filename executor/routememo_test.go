package executor

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/request"
)

func memoTokens(id, n int) []DispatchToken {
	toks := make([]DispatchToken, n)
	for i := range toks {
		toks[i] = DispatchToken{ID: request.ID(id), Pos: i, DP: id % 3}
	}
	return toks
}

// The members of a group that route one list take the counts of the first
// that routed it, which are what SampledRouteCounts gives; a list that differs by
// one token (a member whose batch differs) gets its own; an entry goes once
// every member took it, and lists no other member routes never pile up.
func TestRouteMemo(t *testing.T) {
	r := Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}
	m := newRouteMemo()
	var b routeBufs
	want := func(toks []DispatchToken) []int64 {
		c := make([]int64, 4)
		require.NoError(t, SampledRouteCounts(r, toks, c))
		return c
	}
	a := memoTokens(1, 300)
	for member := range 3 {
		got := make([]int64, 4)
		require.NoError(t, m.route(r, a, got, 3, &b))
		require.Equal(t, want(a), got, "member %d", member)
		if member < 2 {
			require.Len(t, m.entries, 1, "the list waits for the members still to route it")
		}
	}
	require.Empty(t, m.entries, "every member took it")

	// One token apart: its own counts, not the first list's.
	other := memoTokens(1, 300)
	other[299].Pos = 5000
	got := make([]int64, 4)
	require.NoError(t, m.route(r, a, got, 2, &b))
	got = make([]int64, 4)
	require.NoError(t, m.route(r, other, got, 2, &b))
	require.Equal(t, want(other), got)
	require.NotEqual(t, want(a), want(other), "the test needs lists whose counts differ")
	require.Len(t, m.entries, 2)

	// Counts are added to what counts holds, as SampledRouteCounts does.
	got = []int64{1, 1, 1, 1}
	require.NoError(t, m.route(r, a, got, 2, &b))
	for p, c := range want(a) {
		require.Equal(t, c+1, got[p])
	}

	// Lists no other member routes: bounded.
	for id := range routeMemoCap + 10 {
		require.NoError(t, m.route(r, memoTokens(id+10, 3), make([]int64, 4), 2, &b))
	}
	require.Len(t, m.entries, routeMemoCap)

	// In-process ranks route at once (run under -race).
	m = newRouteMemo()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var b routeBufs
			for id := range 20 {
				got, want := make([]int64, 4), make([]int64, 4)
				if err := m.route(r, memoTokens(id, 50), got, 4, &b); err != nil {
					t.Error(err)
				}
				if err := SampledRouteCounts(r, memoTokens(id, 50), want); err != nil || !slices.Equal(got, want) {
					t.Errorf("list %d: counts %v, RouteCounts %v (%v)", id, got, want, err)
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, m.entries)
}
