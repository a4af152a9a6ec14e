package executor

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The ranks of a group price a step once: the others take the answer for
// a batch equal to theirs; another batch, or the same batch's prefill
// where decode was asked, is priced again; an entry goes once every rank
// took it; a memo of nil, or a group of one, prices every time.
func TestStepMemo(t *testing.T) {
	calls := 0
	price := func(b []Seq) time.Duration {
		calls++
		d := time.Duration(len(b)) * time.Millisecond
		for _, q := range b {
			d += time.Duration(q.Tokens + 7*q.DP + 3*q.Past)
		}
		return d
	}
	m := newStepMemo()
	a := []Seq{{Tokens: 100, DP: 0}, {Tokens: 40, DP: 1}}
	for rank := range 4 {
		require.Equal(t, price(a)-0, m.time(true, a, 4, price), "rank %d", rank)
	}
	require.Equal(t, 4+1, calls, "priced once for the group (and 4 times by the test itself)")
	require.Empty(t, m.entries, "every rank took it")

	calls = 0
	b := []Seq{{Tokens: 100, DP: 0}, {Tokens: 41, DP: 1}}
	m.time(true, a, 2, price)
	require.Equal(t, price(b), m.time(true, b, 2, price)+0, "a batch one token apart is priced for itself")
	require.NotEqual(t, m.time(true, a, 2, price), m.time(true, b, 2, price), "the test needs batches whose prices differ")
	// Priced: a, b (and b once more by the test); the second look at each
	// took its entry.
	require.Equal(t, 3, calls)
	require.Empty(t, m.entries)
	m.time(false, a, 2, price) // a's prefill: not a's decode
	require.Equal(t, 4, calls)
	require.Len(t, m.entries, 1)

	calls = 0
	(*stepMemo)(nil).time(true, a, 4, price)
	m.time(true, a, 1, price)
	require.Equal(t, 2, calls, "no memo, or a group of one: priced every time")

	for i := range stepMemoCap + 5 {
		m.time(true, []Seq{{Tokens: i}}, 2, price)
	}
	require.Len(t, m.entries, stepMemoCap, "bounded")

	// Ranks in process price at once (run under -race).
	m = newStepMemo()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int]time.Duration{}
	for r := range 4 {
		wg.Go(func() {
			d := m.time(true, a, 4, func(b []Seq) time.Duration {
				return time.Duration(len(b)) * time.Second
			})
			mu.Lock()
			got[r] = d
			mu.Unlock()
		})
	}
	wg.Wait()
	for r := range 4 {
		require.Equal(t, 2*time.Second, got[r])
	}
	require.Empty(t, m.entries)
}
