package executor

import (
	"slices"
	"sync"
	"time"
)

// stepMemo lets the ranks of an executor group in one process price a
// step once: every rank of a group asks Compute about the same agreed
// batch (TP siblings, or every rank of an attention-DP group: 32 at rack
// scale) and Compute is pure (its contract), so the answer one rank got
// for a batch equal to its own, entry for entry, is its answer. An entry
// goes once members ranks took it, or when too many wait. A nil memo
// computes every time.
type stepMemo struct {
	mu      sync.Mutex
	entries []*stepEntry // oldest first
}

type stepEntry struct {
	decode         bool
	batch          []Seq
	d              time.Duration
	taken, members int
}

const stepMemoCap = 256

func newStepMemo() *stepMemo { return &stepMemo{} }

// time is compute(batch)'s answer for one of members ranks that ask it.
func (m *stepMemo) time(decode bool, batch []Seq, members int, compute func([]Seq) time.Duration) time.Duration {
	if m == nil || members < 2 {
		return compute(batch)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, e := range m.entries {
		if e.decode != decode || !slices.Equal(e.batch, batch) {
			continue
		}
		if e.taken++; e.taken >= e.members {
			m.entries = slices.Delete(m.entries, i, i+1)
		}
		return e.d
	}
	e := &stepEntry{decode: decode, batch: slices.Clone(batch), d: compute(batch), taken: 1, members: members}
	if len(m.entries) == stepMemoCap {
		m.entries = slices.Delete(m.entries, 0, 1)
	}
	m.entries = append(m.entries, e)
	return e.d
}
