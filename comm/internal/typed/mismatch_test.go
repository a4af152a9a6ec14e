package typed

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/flight"
)

// TestPairSumsAgreeWithPairRows: the two sums checked mode exchanges
// (PairSums) are the fold of the counts it gathers when they do not balance
// (PairRows), and they balance exactly when FirstUnpaired finds every count
// paired: over random Gather, Scatter and Alltoall counts on 2 to 6 ranks,
// half of them with one count off.
func TestPairSumsAgreeWithPairRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	es := dtInt32.Size()
	paired, unpaired := 0, 0
	for range 2000 {
		n := 2 + rng.IntN(5)
		kind := []flight.Kind{flight.KindGather, flight.KindScatter, flight.KindAlltoall}[rng.IntN(3)]
		root := rng.IntN(n)
		// m[i][j]: what i sends j, the truth every rank's op is built from.
		m := make([][]int, n)
		for i := range m {
			m[i] = make([]int, n)
			for j := range m[i] {
				m[i][j] = rng.IntN(4)
			}
		}
		ops := make([]*Op, n)
		for r := range n {
			op := &Op{Kind: kind, Type: dtInt32, Root: root}
			switch kind {
			case flight.KindGather:
				op.Send = make([]byte, m[r][root]*es)
				op.RecvCounts = make([]int, n)
				for i := range n {
					op.RecvCounts[i] = m[i][root]
				}
			case flight.KindScatter:
				op.Recv = make([]byte, m[root][r]*es)
				op.SendCounts = slices.Clone(m[root])
			case flight.KindAlltoall:
				op.SendCounts = slices.Clone(m[r])
				op.RecvCounts = make([]int, n)
				for i := range n {
					op.RecvCounts[i] = m[i][r]
				}
			}
			ops[r] = op
		}
		off := rng.IntN(2) == 0
		if off { // one rank's view of one count is off by one
			r := rng.IntN(n)
			op := ops[r]
			switch kind {
			case flight.KindGather:
				op.Send = append(op.Send, make([]byte, es)...)
			case flight.KindScatter:
				op.Recv = append(op.Recv, make([]byte, es)...)
			case flight.KindAlltoall:
				op.SendCounts[rng.IntN(n)]++
			}
		}
		var sent, expected int64
		rows := make([][]int64, n)
		for r, op := range ops {
			s, e := op.PairSums(r, n)
			sends, expects := op.PairRows(r, n)
			var fs, fe uint64
			for j, k := range sends {
				if k >= 0 {
					fs += pairHash(r, j, k)
				}
			}
			for i, k := range expects {
				if k >= 0 {
					fe += pairHash(i, r, k)
				}
			}
			require.Equal(t, int64(fs), s, "%s rank %d: PairSums' sends are not PairRows'", kind, r)
			require.Equal(t, int64(fe), e, "%s rank %d: PairSums' expectations are not PairRows'", kind, r)
			sent, expected = sent+s, expected+e
			rows[r] = append(sends, expects...)
		}
		_, found := FirstUnpaired(kind, rows)
		assert.Equal(t, off, found, "%s on %d ranks: a count off by one, found unpaired", kind, n)
		assert.Equal(t, !off, sent == expected, "%s on %d ranks: the sums balance exactly when every count pairs up", kind, n)
		if off {
			unpaired++
		} else {
			paired++
		}
	}
	assert.Greater(t, paired, 500)
	assert.Greater(t, unpaired, 500)
}
