package executor

import (
	"slices"
	"sync"
)

// routeMemo lets the ranks of one process that route the same tokens (the
// members of an EP group: each routes every member's DP tokens to check
// what they send it) route them once. An entry holds one token list and
// its counts; a rank takes a list's counts only where its list is equal,
// token for token, to the one they were computed from, so ranks whose
// batches differ compute their own, and the dispatch check sees the
// difference as before. Counts are a pure function of the tokens
// (SampledRouteCounts), so taking them is computing them. An entry goes once
// every member has taken it (or when too many lists are waiting: a rank
// whose batch differs leaves one behind). The zero value is not usable;
// a nil memo routes every list.
type routeMemo struct {
	mu      sync.Mutex
	entries []*routeEntry // oldest first
}

type routeEntry struct {
	r       Routing
	sum     uint64
	toks    []DispatchToken
	counts  []int64
	taken   int // ranks that have these counts, the one that computed them included
	members int
}

// routeMemoCap bounds the entries waiting: a step's lists of every DP index
// for a few steps of the largest EP groups.
const routeMemoCap = 1024

func newRouteMemo() *routeMemo { return &routeMemo{} }

// route adds to counts (one entry per EP part) the counts of toks, as
// SampledRouteCounts does, for one of members ranks that route the same
// lists.
func (m *routeMemo) route(r Routing, toks []DispatchToken, counts []int64, members int, b *routeBufs) error {
	if m == nil || members < 2 {
		return b.sampled(r, toks, counts)
	}
	sum := tokensSum(toks)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, e := range m.entries {
		if e.sum != sum || e.r != r || len(e.counts) != len(counts) || !slices.Equal(e.toks, toks) {
			continue
		}
		for p, c := range e.counts {
			counts[p] += c
		}
		if e.taken++; e.taken == e.members {
			m.entries = slices.Delete(m.entries, i, i+1)
		}
		return nil
	}
	e := &routeEntry{r: r, sum: sum, toks: slices.Clone(toks), counts: make([]int64, len(counts)), taken: 1, members: members}
	if err := b.sampled(r, toks, e.counts); err != nil {
		return err
	}
	for p, c := range e.counts {
		counts[p] += c
	}
	if len(m.entries) == routeMemoCap {
		m.entries = slices.Delete(m.entries, 0, 1)
	}
	m.entries = append(m.entries, e)
	return nil
}

// tokensSum is a hash of a token list, to pass over most unequal entries
// without comparing them.
func tokensSum(toks []DispatchToken) uint64 {
	h := uint64(len(toks)) * 0x9E3779B97F4A7C15
	for _, t := range toks {
		h = (h ^ uint64(t.ID)) * 0x100000001B3
		h = (h ^ uint64(t.Pos)<<20 ^ uint64(t.DP)) * 0x100000001B3
	}
	return h
}
