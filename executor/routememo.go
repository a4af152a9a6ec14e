package executor

import (
	"slices"
	"sync"
)

// routeMemo lets the ranks of one process that route the same tokens (the
// members of an EP group: each routes every member's DP tokens to check
// what they send it) route them once a step. An entry holds one step's
// spans and the group's counts for them (a row for each member's DP
// index); a rank takes them only where its step, its group's DP indices
// and the tokens its CP index picks are equal to those they were computed
// from, so ranks whose batches differ compute their own, and the dispatch
// check sees the difference as before. Counts are a pure function of the
// tokens (SampledRouteCounts), so taking them is computing them. An entry
// goes once every member has taken it (or when too many are waiting: a
// rank whose batch differs leaves one behind). A nil memo computes every
// step.
type routeMemo struct {
	mu      sync.Mutex
	entries []*routeEntry // oldest first
}

type routeEntry struct {
	r            Routing
	f            cpFilter
	sum          uint64
	spans        []dispatchSpan
	dps          []int
	rows         stepRows
	taken, ranks int
}

// routeMemoCap bounds the entries waiting: a few steps of every EP group.
const routeMemoCap = 1024

func newRouteMemo() *routeMemo { return &routeMemo{} }

// stepRows is a step's dispatch counts for an EP group: rows[i] for the DP
// index of member i, one count a part (a member). Read only once shared.
type stepRows [][]int64

// compute fills rows for spans over the group of DP indices dps (a row
// each, computed once for each distinct index), reusing rows' buffers.
func (rows *stepRows) compute(r Routing, spans []dispatchSpan, f cpFilter, dps []int, b *routeBufs) error {
	n := len(dps)
	if len(*rows) != n {
		*rows = make(stepRows, n)
		for i := range *rows {
			(*rows)[i] = make([]int64, n)
		}
	}
	for i, dp := range dps {
		row := (*rows)[i]
		if j := slices.Index(dps, dp); j < i {
			copy(row, (*rows)[j]) // a DP index of several members (TP siblings)
			continue
		}
		clear(row)
		b.sel = b.sel[:0]
		for _, sp := range spans {
			if sp.DP == dp {
				b.sel = append(b.sel, sp)
			}
		}
		if err := b.sampledSpans(r, b.sel, f, row); err != nil {
			return err
		}
	}
	return nil
}

// step is the group's counts for one step: spans over DP indices dps,
// the tokens f picks. own holds them where no other rank shares them; the
// result is read only.
func (m *routeMemo) step(r Routing, spans []dispatchSpan, f cpFilter, dps []int, own *stepRows, b *routeBufs) (stepRows, error) {
	if m == nil || len(dps) < 2 {
		err := own.compute(r, spans, f, dps, b)
		return *own, err
	}
	sum := spansSum(spans)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, e := range m.entries {
		if e.sum != sum || e.r != r || e.f != f || !slices.Equal(e.dps, dps) || !slices.Equal(e.spans, spans) {
			continue
		}
		if e.taken++; e.taken == e.ranks {
			m.entries = slices.Delete(m.entries, i, i+1)
		}
		return e.rows, nil
	}
	e := &routeEntry{r: r, f: f, sum: sum, spans: slices.Clone(spans), dps: dps, taken: 1, ranks: len(dps)}
	if err := e.rows.compute(r, spans, f, dps, b); err != nil {
		return nil, err
	}
	if len(m.entries) == routeMemoCap {
		m.entries = slices.Delete(m.entries, 0, 1)
	}
	m.entries = append(m.entries, e)
	return e.rows, nil
}

// spansSum is a hash of a span list, to pass over most unequal entries
// without comparing them.
func spansSum(spans []dispatchSpan) uint64 {
	h := uint64(len(spans)) * 0x9E3779B97F4A7C15
	for _, t := range spans {
		h = (h ^ uint64(t.ID)) * 0x100000001B3
		h = (h ^ uint64(t.Pos)<<20 ^ uint64(t.N)<<40 ^ uint64(t.DP)) * 0x100000001B3
	}
	return h
}
