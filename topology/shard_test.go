package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestModelValidate(t *testing.T) {
	require.NoError(t, DefaultModel().Validate())
	require.NoError(t, Model{Layers: 1 << 12, KVHeads: 1 << 10, HeadDim: 1 << 8, TokensPerBlock: 1 << 8, ElemBytes: 2}.Validate(), "a 1 TiB block is held")
	for _, tc := range []struct {
		mod  func(*Model)
		want string
	}{
		{func(m *Model) { m.Layers = 0 }, "topology: invalid model: Layers must be positive (got 0)"},
		{func(m *Model) { m.KVHeads = -1 }, "topology: invalid model: KVHeads must be positive (got -1)"},
		{func(m *Model) { m.HeadDim = 0 }, "topology: invalid model: HeadDim must be positive (got 0)"},
		{func(m *Model) { m.TokensPerBlock = 0 }, "topology: invalid model: TokensPerBlock must be positive (got 0)"},
		{func(m *Model) { m.ElemBytes = 0 }, "topology: invalid model: ElemBytes must be positive (got 0)"},
		{func(m *Model) { m.HeadDim = 1 << 20 }, "topology: invalid model: HeadDim must be at most 65536 (got 1048576)"},
		// Every field in range, the block overflows an int64 (it panicked
		// once, dividing by its wrapped size): 2^65 bytes.
		{func(m *Model) {
			*m = Model{Layers: 1 << 16, KVHeads: 1 << 16, HeadDim: 1 << 16, TokensPerBlock: 1 << 16, ElemBytes: 1}
		},
			"topology: invalid model: a KV block of the whole model (Layers 65536 x KVHeads 65536 x 2 x TokensPerBlock 65536 x HeadDim 65536 x ElemBytes 1) is 3.689e+19 bytes: must be at most 1099511627776 (1 TiB)"},
		// The largest block held (1 TiB, ElemBytes 2) passes; ElemBytes 3 does not.
		{func(m *Model) {
			*m = Model{Layers: 1 << 12, KVHeads: 1 << 10, HeadDim: 1 << 8, TokensPerBlock: 1 << 8, ElemBytes: 3}
		},
			"topology: invalid model: a KV block of the whole model (Layers 4096 x KVHeads 1024 x 2 x TokensPerBlock 256 x HeadDim 256 x ElemBytes 3) is 1.649e+12 bytes: must be at most 1099511627776 (1 TiB)"},
	} {
		m := DefaultModel()
		tc.mod(&m)
		err := m.Validate()
		assert.ErrorIs(t, err, ErrInvalidModel)
		assert.EqualError(t, err, tc.want)
	}
}

func TestValidateFor(t *testing.T) {
	m := DefaultModel() // 8 layers, 8 heads
	for _, tc := range []struct {
		spec, err string
	}{
		{"tp=8,pp=8", ""},
		{"tp=16", ""},         // heads duplicated twice
		{"dp=2,tp=3,adp", ""}, // attention-DP: every rank holds all heads
		{"pp=3", "8 layers do not split evenly over pp=3"},
		{"tp=3", "8 KV heads do not split evenly over tp=3"},
		{"tp=12", "tp=12 exceeds 8 KV heads but is not a multiple of them"},
	} {
		err := MustParseLayout(tc.spec).ValidateFor(m)
		if tc.err == "" {
			assert.NoError(t, err, tc.spec)
			continue
		}
		assert.ErrorIs(t, err, ErrIncompatible, tc.spec)
		assert.ErrorContains(t, err, tc.err, tc.spec)
	}
}

func TestShard(t *testing.T) {
	m := DefaultModel()
	for _, tc := range []struct {
		spec                   string
		rank                   int
		layers, heads          [2]int
		cp, cpIndex, blockSize int
	}{
		{"tp=1", 0, [2]int{0, 8}, [2]int{0, 8}, 1, 0, 8 * 8 * 2 * 16 * 128},
		{"tp=4", 3, [2]int{0, 8}, [2]int{6, 8}, 1, 0, 8 * 2 * 2 * 16 * 128},
		{"tp=2,pp=2", 3, [2]int{4, 8}, [2]int{4, 8}, 1, 0, 4 * 4 * 2 * 16 * 128},
		{"tp=16", 5, [2]int{0, 8}, [2]int{2, 3}, 1, 0, 8 * 1 * 2 * 16 * 128},
		{"tp=2,cp=2", 3, [2]int{0, 8}, [2]int{4, 8}, 2, 1, 8 * 4 * 2 * 16 * 128},
		{"tp=2,dp=2,adp", 3, [2]int{0, 8}, [2]int{0, 8}, 1, 0, 8 * 8 * 2 * 16 * 128},
	} {
		s, err := MustParseLayout(tc.spec).Shard(m, tc.rank)
		require.NoError(t, err, tc.spec)
		assert.Equal(t, tc.layers, [2]int{s.LayerLo, s.LayerHi}, tc.spec)
		assert.Equal(t, tc.heads, [2]int{s.HeadLo, s.HeadHi}, tc.spec)
		assert.Equal(t, tc.cp, s.CP, tc.spec)
		assert.Equal(t, tc.cpIndex, s.CPIndex, tc.spec)
		assert.Equal(t, tc.blockSize, s.BlockBytes(), tc.spec)
	}
	_, err := MustParseLayout("pp=3").Shard(m, 0)
	assert.ErrorIs(t, err, ErrIncompatible)
}

// TestOffsetTiles checks that Offset tiles a block exactly: every
// (layer, kv, head, token) gets its own HeadBytes, none overlap, none is
// left over, and a head run is contiguous.
func TestOffsetTiles(t *testing.T) {
	m := Model{Layers: 4, KVHeads: 4, HeadDim: 3, TokensPerBlock: 5, ElemBytes: 2}
	for _, spec := range []string{"tp=1", "tp=2,pp=2", "tp=8", "dp=2,adp"} {
		l := MustParseLayout(spec)
		for r := 0; r < l.Ranks(); r++ {
			s, err := l.Shard(m, r)
			require.NoError(t, err)
			used := make([]int, s.BlockBytes())
			for layer := s.LayerLo; layer < s.LayerHi; layer++ {
				for _, kv := range []KV{K, V} {
					for h := s.HeadLo; h < s.HeadHi; h++ {
						for tok := 0; tok < m.TokensPerBlock; tok++ {
							off := s.Offset(layer, kv, h, tok)
							for b := off; b < off+m.HeadBytes(); b++ {
								used[b]++
							}
						}
					}
					run := s.Offset(layer, kv, s.HeadLo, 0)
					last := s.Offset(layer, kv, s.HeadHi-1, m.TokensPerBlock-1) + m.HeadBytes()
					assert.Equal(t, s.RunBytes(s.HeadLo, s.HeadHi), last-run)
				}
			}
			for b, n := range used {
				require.Equal(t, 1, n, "%s rank %d byte %d", spec, r, b)
			}
			assert.Panics(t, func() { s.Offset(s.LayerHi, K, s.HeadLo, 0) })
			assert.Panics(t, func() { s.Offset(s.LayerLo, V, s.HeadLo, m.TokensPerBlock) })
			assert.Panics(t, func() { s.Offset(s.LayerLo, KV(2), s.HeadLo, 0) })
		}
	}
}

func TestBlocksFor(t *testing.T) {
	m := DefaultModel() // 16 tokens per block
	assert.Equal(t, 0, m.Blocks(0))
	assert.Equal(t, 1, m.Blocks(1))
	assert.Equal(t, 1, m.Blocks(16))
	assert.Equal(t, 2, m.Blocks(17))
	l := MustParseLayout("cp=3")
	// 100 tokens = 7 blocks: cp0 gets 0,3,6; cp1 1,4; cp2 2,5.
	want := []int{3, 2, 2}
	for r := 0; r < 3; r++ {
		s, err := l.Shard(m, r)
		require.NoError(t, err)
		assert.Equal(t, want[r], s.BlocksFor(100))
		assert.Equal(t, 0, s.BlocksFor(0))
	}
	s, _ := l.Shard(m, 1)
	local, ok := s.LocalBlock(4)
	assert.True(t, ok)
	assert.Equal(t, 1, local)
	_, ok = s.LocalBlock(3)
	assert.False(t, ok)
	assert.True(t, s.Holds(0, 0, 4))
	assert.False(t, s.Holds(0, 0, 5))
}

func TestGroups(t *testing.T) {
	l := MustParseLayout("tp=2,pp=2,dp=2") // rank = (dp*2+pp)*2+tp
	assert.Equal(t, []int{4, 5}, l.TPGroup(5))
	assert.Equal(t, []int{5, 7}, l.PPGroup(5))
	assert.Equal(t, []int{5}, l.CPGroup(5))
	assert.Equal(t, []int{4, 5, 6, 7}, l.DPGroup(5))
	assert.Equal(t, []int{1, 5}, l.DPPeers(5))
	assert.Equal(t, []int{4, 5, 6, 7}, l.ExecutorGroup(5))
	assert.Equal(t, [][]int{{4, 5}, {5, 7}}, l.CtxScopes(5))
	assert.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}, l.GenScopes(5))

	a := MustParseLayout("tp=2,pp=2,dp=2,adp")
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, a.ExecutorGroup(5))
	assert.Equal(t, [][]int{{5, 7}}, a.CtxScopes(5))
	assert.Equal(t, [][]int{{5, 7}}, a.GenScopes(5))

	c := MustParseLayout("pp=2,cp=2,dp=2,adp") // rank = (dp*2+pp)*2+cp
	assert.Equal(t, [][]int{{4, 5, 6, 7}}, c.GenScopes(6))
	assert.Equal(t, []int{6, 7}, c.CPGroup(6))

	// EP: contiguous FFN indices (f / ep shared); under adp f = dp*tp + tp.
	assert.Equal(t, []int{5}, l.EPGroup(5))
	e := MustParseLayout("tp=4,pp=2,ep=2") // rank = pp*4 + tp
	assert.Equal(t, []int{6, 7}, e.EPGroup(6))
	assert.Equal(t, []int{0, 1}, e.EPGroup(1))
	assert.Equal(t, 3, e.FFNIndex(7))
	d := MustParseLayout("dp=4,ep=4,adp") // the seed's ctx: every rank one EP group
	assert.Equal(t, []int{0, 1, 2, 3}, d.EPGroup(2))
	assert.Equal(t, 4, d.FFNRanks())
	m := MustParseLayout("tp=2,pp=2,dp=4,ep=4,adp")       // rank = (dp*2+pp)*2+tp; f = dp*2+tp
	assert.Equal(t, []int{0, 1, 4, 5}, m.EPGroup(5))      // dp0/pp0 and dp1/pp0
	assert.Equal(t, []int{10, 11, 14, 15}, m.EPGroup(10)) // dp2/pp1 and dp3/pp1
	assert.Equal(t, 6, m.FFNIndex(14))
	assert.Equal(t, 1, MustParseLayout("tp=2").Experts())

	assert.Panics(t, func() { l.TPGroup(8) })
	assert.Panics(t, func() { a.ExecutorGroup(-1) })
	assert.Panics(t, func() { m.EPGroup(16) })
}

// TestGroupsPartition checks on several layouts that each kind of group
// partitions the instance and that every group is sorted and contains rank.
func TestGroupsPartition(t *testing.T) {
	for _, spec := range []string{"tp=1", "tp=2,pp=3,cp=2,dp=2", "dp=3,adp,tp=2,cp=2", "dp=3,adp,tp=2,cp=2,ep=3", "tp=4,pp=2,dp=2,ep=2"} {
		l := MustParseLayout(spec)
		kinds := map[string]func(int) []int{
			"tp": l.TPGroup, "pp": l.PPGroup, "cp": l.CPGroup, "dp": l.DPGroup, "dppeers": l.DPPeers,
			"exec": l.ExecutorGroup, "ep": l.EPGroup, "gen": func(r int) []int { return l.GenScopes(r)[0] },
			"ctxlast": func(r int) []int { s := l.CtxScopes(r); return s[len(s)-1] },
		}
		for name, g := range kinds {
			owner := map[int]string{}
			for r := 0; r < l.Ranks(); r++ {
				grp := g(r)
				assert.IsIncreasing(t, grp, "%s %s", spec, name)
				assert.Contains(t, grp, r)
				key := ""
				for _, x := range grp {
					key += "," + string(rune('0'+x))
				}
				for _, x := range grp {
					if prev, ok := owner[x]; ok {
						assert.Equal(t, prev, key, "%s %s: rank %d in two groups", spec, name, x)
					}
					owner[x] = key
				}
			}
			assert.Len(t, owner, l.Ranks())
		}
	}
}
