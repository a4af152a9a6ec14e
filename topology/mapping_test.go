package topology

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func frag(ctx, gen, llo, lhi, hlo, hhi, mod, rem int) Fragment {
	return Fragment{CtxRank: ctx, GenRank: gen, LayerLo: llo, LayerHi: lhi, HeadLo: hlo, HeadHi: hhi, BlockMod: mod, BlockRem: rem}
}

func TestMapFragments(t *testing.T) {
	m8 := DefaultModel() // 8 layers, 8 heads
	m4 := m8
	m4.KVHeads = 4
	for _, tc := range []struct {
		name     string
		ctx, gen string
		m        Model
		dc, dg   int
		want     []Fragment
	}{
		{"ctx tp1 -> gen tp4: gen r gets heads [2r,2r+2) from ctx 0", "tp=1", "tp=4", m8, 0, 0, []Fragment{
			frag(0, 0, 0, 8, 0, 2, 1, 0), frag(0, 1, 0, 8, 2, 4, 1, 0),
			frag(0, 2, 0, 8, 4, 6, 1, 0), frag(0, 3, 0, 8, 6, 8, 1, 0),
		}},
		{"ctx tp4 -> gen tp1: every ctx rank sends its heads", "tp=4", "tp=1", m8, 0, 0, []Fragment{
			frag(0, 0, 0, 8, 0, 2, 1, 0), frag(1, 0, 0, 8, 2, 4, 1, 0),
			frag(2, 0, 0, 8, 4, 6, 1, 0), frag(3, 0, 0, 8, 6, 8, 1, 0),
		}},
		{"ctx tp2,pp2 -> gen tp4", "tp=2,pp=2", "tp=4", m8, 0, 0, []Fragment{
			// ctx rank = pp*2+tp: pp0 holds layers [0,4), pp1 [4,8); tp0 heads [0,4), tp1 [4,8).
			frag(0, 0, 0, 4, 0, 2, 1, 0), frag(2, 0, 4, 8, 0, 2, 1, 0),
			frag(0, 1, 0, 4, 2, 4, 1, 0), frag(2, 1, 4, 8, 2, 4, 1, 0),
			frag(1, 2, 0, 4, 4, 6, 1, 0), frag(3, 2, 4, 8, 4, 6, 1, 0),
			frag(1, 3, 0, 4, 6, 8, 1, 0), frag(3, 3, 4, 8, 6, 8, 1, 0),
		}},
		{"ctx tp8 -> gen tp8 with 4 heads: one sender per copy", "tp=8", "tp=8", m4, 0, 0, []Fragment{
			frag(0, 0, 0, 8, 0, 1, 1, 0), frag(1, 1, 0, 8, 0, 1, 1, 0),
			frag(2, 2, 0, 8, 1, 2, 1, 0), frag(3, 3, 0, 8, 1, 2, 1, 0),
			frag(4, 4, 0, 8, 2, 3, 1, 0), frag(5, 5, 0, 8, 2, 3, 1, 0),
			frag(6, 6, 0, 8, 3, 4, 1, 0), frag(7, 7, 0, 8, 3, 4, 1, 0),
		}},
		{"ctx dp2,adp -> gen tp2: DP index 1 of ctx sends all", "dp=2,adp", "tp=2", m8, 1, 0, []Fragment{
			frag(1, 0, 0, 8, 0, 4, 1, 0), frag(1, 1, 0, 8, 4, 8, 1, 0),
		}},
		{"ctx dp2,adp -> gen tp2, DP index 0", "dp=2,adp", "tp=2", m8, 0, 0, []Fragment{
			frag(0, 0, 0, 8, 0, 4, 1, 0), frag(0, 1, 0, 8, 4, 8, 1, 0),
		}},
		{"ctx tp2,dp2,adp -> gen tp1: the gen rank's tp index picks ctx tp0", "tp=2,dp=2,adp", "tp=1", m8, 1, 0, []Fragment{
			frag(2, 0, 0, 8, 0, 8, 1, 0),
		}},
		{"ctx tp1 -> gen tp2,dp2 (gen DP index 1)", "tp=1", "tp=2,dp=2", m8, 0, 1, []Fragment{
			frag(0, 2, 0, 8, 0, 4, 1, 0), frag(0, 3, 0, 8, 4, 8, 1, 0),
		}},
		{"ctx cp2 -> gen cp1: the gen rank gets both residues", "cp=2", "tp=1", m8, 0, 0, []Fragment{
			frag(0, 0, 0, 8, 0, 8, 2, 0), frag(1, 0, 0, 8, 0, 8, 2, 1),
		}},
		{"ctx cp1 -> gen cp2: each gen cp rank gets its residue", "tp=1", "cp=2", m8, 0, 0, []Fragment{
			frag(0, 0, 0, 8, 0, 8, 2, 0), frag(0, 1, 0, 8, 0, 8, 2, 1),
		}},
		{"ctx pp2 -> gen pp4: layers split by overlap", "pp=2", "pp=4", m8, 0, 0, []Fragment{
			frag(0, 0, 0, 2, 0, 8, 1, 0), frag(0, 1, 2, 4, 0, 8, 1, 0),
			frag(1, 2, 4, 6, 0, 8, 1, 0), frag(1, 3, 6, 8, 0, 8, 1, 0),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp, err := Map(MustParseLayout(tc.ctx), MustParseLayout(tc.gen), tc.m)
			require.NoError(t, err)
			got := mp.Fragments(tc.dc, tc.dg)
			assert.Equal(t, tc.want, got)
			checkCoverage(t, mp, tc.dc, tc.dg)
		})
	}
}

func TestMapHelpers(t *testing.T) {
	mp, err := Map(MustParseLayout("tp=2,pp=2"), MustParseLayout("tp=4"), DefaultModel())
	require.NoError(t, err)
	assert.Equal(t, []Fragment{frag(1, 2, 0, 4, 4, 6, 1, 0), frag(1, 3, 0, 4, 6, 8, 1, 0)}, mp.CtxFragments(0, 0, 1))
	assert.Equal(t, []Fragment{frag(0, 0, 0, 4, 0, 2, 1, 0), frag(2, 0, 4, 8, 0, 2, 1, 0)}, mp.GenFragments(0, 0, 0))
	assert.Equal(t, []int{0, 2}, mp.CtxPeers(0, 0, 1))
	assert.Equal(t, []int{2, 3}, mp.GenPeers(0, 0, 3))
	assert.Empty(t, mp.GenFragments(0, 0, 7))
	f := mp.GenFragments(0, 0, 0)[0]
	// 4 layers * 2 heads * K,V * 16 tokens * 64 dims * 2 bytes * 3 blocks
	assert.Equal(t, 4*2*2*16*64*2*3, mp.FragmentBytes(f, 3))
	assert.Equal(t, 5, f.BlockCount(5))
	assert.Equal(t, "ctx 0 -> gen 0: layers [0,4) heads [0,2) blocks %1==0", f.String())
	assert.Panics(t, func() { mp.Fragments(1, 0) })
	assert.Panics(t, func() { mp.Fragments(0, -1) })

	cp, err := Map(MustParseLayout("cp=4"), MustParseLayout("cp=2"), DefaultModel())
	require.NoError(t, err)
	f = cp.GenFragments(0, 0, 1)[1] // ctx cp3 -> gen cp1: blocks 3, 7, 11, ...
	assert.Equal(t, frag(3, 1, 0, 8, 0, 8, 4, 3), f)
	assert.Equal(t, 2, f.BlockCount(8))
	assert.Equal(t, 3, f.BlockCount(12))
	assert.Equal(t, 0, f.BlockCount(3))
}

func TestMapErrors(t *testing.T) {
	m := DefaultModel()
	for _, tc := range []struct {
		ctx, gen Layout
		m        Model
		is       error
		msg      string
	}{
		{MustParseLayout("cp=2"), MustParseLayout("cp=3"), m, ErrIncompatible,
			`topology: map ctx "cp=2" -> gen "cp=3": topology: incompatible layout: ctx cp=2 and gen cp=3: one must divide the other`},
		{MustParseLayout("pp=3"), MustParseLayout("tp=1"), m, ErrIncompatible,
			`topology: map ctx "pp=3" -> gen "tp=1": ctx: topology: incompatible layout: layout pp=3: 8 layers do not split evenly over pp=3`},
		{MustParseLayout("tp=1"), MustParseLayout("tp=3"), m, ErrIncompatible, `gen: topology: incompatible layout: layout tp=3: 8 KV heads do not split evenly`},
		{MustParseLayout("tp=1"), MustParseLayout("tp=12"), m, ErrIncompatible, `tp=12 exceeds 8 KV heads but is not a multiple`},
		{Layout{}, MustParseLayout("tp=1"), m, ErrInvalidLayout, `ctx: topology: layout "tp=0,pp=0,cp=0,dp=0": tp must be a positive integer`},
		{MustParseLayout("tp=1"), MustParseLayout("tp=1"), Model{}, ErrInvalidModel, `Layers must be positive`},
	} {
		_, err := Map(tc.ctx, tc.gen, tc.m)
		assert.ErrorIs(t, err, tc.is)
		assert.ErrorContains(t, err, tc.msg)
	}
}

// holdsRef is the reference for what a rank holds, written from the spec
// without the package's helpers.
func holdsRef(l Layout, m Model, rank, layer, head, block int) bool {
	tp := rank % l.TP
	cp := rank / l.TP % l.CP
	pp := rank / (l.TP * l.CP) % l.PP
	per := m.Layers / l.PP
	if layer < pp*per || layer >= (pp+1)*per || block%l.CP != cp {
		return false
	}
	switch {
	case l.AttentionDP:
		return true
	case l.TP <= m.KVHeads:
		h := m.KVHeads / l.TP
		return head >= tp*h && head < (tp+1)*h
	default:
		return head == tp/(l.TP/m.KVHeads)
	}
}

// checkCoverage enumerates every (layer, head, K/V, block) of every GEN rank
// of DP index dg and checks that exactly one fragment of CTX DP index dc
// delivers it, that the sender holds it, and that no fragment carries
// anything its receiver does not hold.
func checkCoverage(t *testing.T, mp *Mapping, dc, dg int) {
	t.Helper()
	ctx, gen, m := mp.Ctx, mp.Gen, mp.Model
	frags := mp.Fragments(dc, dg)
	nBlocks := 2*mp.BlockMod + 1
	for _, f := range frags {
		require.Equal(t, mp.BlockMod, f.BlockMod)
		require.True(t, f.CtxRank >= dc*ctx.ReplicaRanks() && f.CtxRank < (dc+1)*ctx.ReplicaRanks(), "%v: sender outside ctx DP index %d", f, dc)
		require.True(t, f.GenRank >= dg*gen.ReplicaRanks() && f.GenRank < (dg+1)*gen.ReplicaRanks(), "%v: receiver outside gen DP index %d", f, dg)
		require.True(t, f.LayerLo < f.LayerHi && f.HeadLo < f.HeadHi, "%v: empty fragment", f)
		for layer := f.LayerLo; layer < f.LayerHi; layer++ {
			for head := f.HeadLo; head < f.HeadHi; head++ {
				for b := f.BlockRem; b < nBlocks; b += f.BlockMod {
					require.True(t, holdsRef(ctx, m, f.CtxRank, layer, head, b), "%v: sender lacks layer %d head %d block %d", f, layer, head, b)
					require.True(t, holdsRef(gen, m, f.GenRank, layer, head, b), "%v: receiver lacks layer %d head %d block %d", f, layer, head, b)
				}
			}
		}
	}
	byGen := map[int][]Fragment{}
	for _, f := range frags {
		byGen[f.GenRank] = append(byGen[f.GenRank], f)
	}
	for g := dg * gen.ReplicaRanks(); g < (dg+1)*gen.ReplicaRanks(); g++ {
		for layer := 0; layer < m.Layers; layer++ {
			for head := 0; head < m.KVHeads; head++ {
				for _, kv := range []KV{K, V} {
					for b := 0; b < nBlocks; b++ {
						want := 0
						if holdsRef(gen, m, g, layer, head, b) {
							want = 1
						}
						got := 0
						for _, f := range byGen[g] {
							// Fragments always carry K and V together.
							if f.Covers(layer, head, b) && (kv == K || kv == V) {
								got++
							}
						}
						require.Equal(t, want, got, "ctx %v -> gen %v: gen rank %d layer %d head %d %v block %d", ctx, gen, g, layer, head, kv, b)
					}
				}
			}
		}
	}
	// The choice among duplicate holders is deterministic.
	require.Equal(t, frags, mp.Fragments(dc, dg))
}

func randLayout(r *rand.Rand, m Model) Layout {
	divisors := func(n int) []int {
		var d []int
		for i := 1; i <= n; i++ {
			if n%i == 0 {
				d = append(d, i)
			}
		}
		return d
	}
	pick := func(xs []int) int { return xs[r.IntN(len(xs))] }
	tps := divisors(m.KVHeads)
	for _, k := range []int{2, 4} {
		tps = append(tps, m.KVHeads*k)
	}
	l := Layout{TP: pick(tps), PP: pick(divisors(m.Layers)), CP: pick([]int{1, 1, 2, 4}), DP: pick([]int{1, 1, 2, 3})}
	if l.DP > 1 && r.IntN(2) == 0 {
		l.AttentionDP = true
		l.TP = pick([]int{1, 1, 2, 3}) // any TP is fine under attention-DP
	}
	return l
}

// TestMapCoverageProperty checks exact coverage on random valid pairs of
// layouts, against the brute-force enumeration of checkCoverage.
func TestMapCoverageProperty(t *testing.T) {
	const seed = 20240604
	r := rand.New(rand.NewPCG(seed, 0))
	models := []Model{
		{Layers: 4, KVHeads: 4, HeadDim: 2, TokensPerBlock: 2, ElemBytes: 1},
		{Layers: 6, KVHeads: 2, HeadDim: 2, TokensPerBlock: 2, ElemBytes: 2},
		{Layers: 8, KVHeads: 8, HeadDim: 4, TokensPerBlock: 4, ElemBytes: 2},
		{Layers: 3, KVHeads: 1, HeadDim: 1, TokensPerBlock: 1, ElemBytes: 1},
	}
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := 0; i < n; i++ {
		m := models[r.IntN(len(models))]
		ctx, gen := randLayout(r, m), randLayout(r, m)
		require.NoError(t, ctx.ValidateFor(m))
		require.NoError(t, gen.ValidateFor(m))
		mp, err := Map(ctx, gen, m)
		if ctx.CP%gen.CP != 0 && gen.CP%ctx.CP != 0 {
			require.ErrorIs(t, err, ErrIncompatible)
			continue
		}
		require.NoError(t, err, "seed %d case %d: %v -> %v", seed, i, ctx, gen)
		t.Run(fmt.Sprintf("%d/%v->%v", i, ctx, gen), func(t *testing.T) {
			checkCoverage(t, mp, r.IntN(ctx.DP), r.IntN(gen.DP))
		})
	}
}

// TestMapSpreadsDuplicates checks that when CTX holds several copies of a
// head, GEN ranks with different TP indices that want the same head are
// served by different CTX ranks where possible.
func TestMapSpreadsDuplicates(t *testing.T) {
	m := DefaultModel()
	mp, err := Map(MustParseLayout("dp=2,tp=4,adp"), MustParseLayout("tp=4,dp=2,adp"), m)
	require.NoError(t, err)
	senders := map[int]bool{}
	for _, f := range mp.Fragments(1, 0) {
		senders[f.CtxRank] = true
	}
	assert.Len(t, senders, 4) // each of the 4 ctx tp ranks of DP index 1 sends to one gen rank
}
