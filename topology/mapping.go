package topology

import (
	"cmp"
	"fmt"
	"slices"
)

// Fragment is a piece of one request's KV that one CTX rank sends to one GEN
// rank: layers [LayerLo, LayerHi), heads [HeadLo, HeadHi), both K and V, of
// the request blocks i with i % BlockMod == BlockRem. Ranks are instance ranks
// of their own layout (CTX or GEN).
type Fragment struct {
	CtxRank, GenRank   int
	LayerLo, LayerHi   int
	HeadLo, HeadHi     int
	BlockMod, BlockRem int
}

func (f Fragment) String() string {
	return fmt.Sprintf("ctx %d -> gen %d: layers [%d,%d) heads [%d,%d) blocks %%%d==%d",
		f.CtxRank, f.GenRank, f.LayerLo, f.LayerHi, f.HeadLo, f.HeadHi, f.BlockMod, f.BlockRem)
}

// Covers reports whether the fragment carries (layer, head) of request block i.
func (f Fragment) Covers(layer, head, block int) bool {
	return layer >= f.LayerLo && layer < f.LayerHi && head >= f.HeadLo && head < f.HeadHi &&
		block >= 0 && block%f.BlockMod == f.BlockRem
}

// BlockCount is the number of a request's blocks [0, totalBlocks) that the
// fragment covers.
func (f Fragment) BlockCount(totalBlocks int) int {
	return residueCount(totalBlocks, f.BlockMod, f.BlockRem)
}

// Mapping says which CTX rank sends what to which GEN rank, for a CTX layout
// and a GEN layout serving one model. Build it with Map; it is immutable and
// safe for concurrent use.
type Mapping struct {
	Ctx, Gen Layout
	Model    Model
	// BlockMod is max(Ctx.CP, Gen.CP): every fragment covers one residue of
	// the request's blocks modulo BlockMod.
	BlockMod int
	base     []Fragment // for CTX DP index 0 and GEN DP index 0
}

// Map builds the CTX -> GEN mapping. Both layouts must hold the model (see
// Layout.ValidateFor) and one CP size must divide the other. Pipeline and
// tensor sizes need not divide one another: fragments are the overlaps of
// layer and head ranges. Every (layer, head, K/V, block) that a GEN rank
// holds is sent by exactly one CTX rank; where several CTX ranks hold it
// (heads duplicated because CTX TP exceeds the heads, or attention-DP), the
// sender is chosen by the GEN rank's TP index, which spreads the load.
// Errors wrap ErrIncompatible, ErrInvalidLayout or ErrInvalidModel.
func Map(ctx, gen Layout, m Model) (*Mapping, error) {
	if err := checkMap(ctx, gen, m); err != nil {
		return nil, err
	}
	mp := &Mapping{Ctx: ctx, Gen: gen, Model: m, BlockMod: max(ctx.CP, gen.CP)}
	mp.base = mp.build()
	return mp, nil
}

// checkMap is Map's verdict without the mapping: nil when ctx -> gen can
// be mapped for m.
func checkMap(ctx, gen Layout, m Model) error {
	where := func() string { return fmt.Sprintf("topology: map ctx %q -> gen %q", ctx.String(), gen.String()) }
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%s: %w", where(), err)
	}
	if err := ctx.ValidateFor(m); err != nil {
		return fmt.Errorf("%s: ctx: %w", where(), err)
	}
	if err := gen.ValidateFor(m); err != nil {
		return fmt.Errorf("%s: gen: %w", where(), err)
	}
	if ctx.CP%gen.CP != 0 && gen.CP%ctx.CP != 0 {
		return fmt.Errorf("%s: %w: ctx cp=%d and gen cp=%d: one must divide the other",
			where(), ErrIncompatible, ctx.CP, gen.CP)
	}
	return nil
}

func (mp *Mapping) build() []Fragment {
	ctx, gen, m := mp.Ctx, mp.Gen, mp.Model
	perStage := m.Layers / ctx.PP
	var out []Fragment
	for g := 0; g < gen.ReplicaRanks(); g++ {
		gs := gen.shard(m, g)
		for p := 0; p < ctx.PP; p++ {
			lo, hi := max(gs.LayerLo, p*perStage), min(gs.LayerHi, (p+1)*perStage)
			if lo >= hi {
				continue
			}
			for cc := 0; cc < ctx.CP; cc++ {
				// Blocks i with i%ctx.CP == cc and i%gen.CP == gs.CPIndex:
				// one residue modulo BlockMod, or none.
				var rem int
				if ctx.CP <= gen.CP {
					if gs.CPIndex%ctx.CP != cc {
						continue
					}
					rem = gs.CPIndex
				} else {
					if cc%gen.CP != gs.CPIndex {
						continue
					}
					rem = cc
				}
				for h := gs.HeadLo; h < gs.HeadHi; {
					tp := ctx.sender(m, h, gs.Coord.TP)
					e := h + 1
					for e < gs.HeadHi && ctx.sender(m, e, gs.Coord.TP) == tp {
						e++
					}
					out = append(out, Fragment{
						CtxRank: ctx.RankOf(Coord{PP: p, CP: cc, TP: tp}), GenRank: g,
						LayerLo: lo, LayerHi: hi, HeadLo: h, HeadHi: e,
						BlockMod: mp.BlockMod, BlockRem: rem,
					})
					h = e
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Fragment) int {
		return cmp.Or(cmp.Compare(a.GenRank, b.GenRank), cmp.Compare(a.CtxRank, b.CtxRank),
			cmp.Compare(a.LayerLo, b.LayerLo), cmp.Compare(a.BlockRem, b.BlockRem), cmp.Compare(a.HeadLo, b.HeadLo))
	})
	return out
}

// sender picks the TP index (of this CTX layout) that sends head h to a GEN
// rank with TP index genTP: one of the holders of h, spread by genTP.
func (l Layout) sender(m Model, h, genTP int) int {
	first, count := l.headHolders(m, h)
	return first + genTP%count
}

func (mp *Mapping) checkDP(dc, dg int) {
	if dc < 0 || dc >= mp.Ctx.DP || dg < 0 || dg >= mp.Gen.DP {
		panic(fmt.Sprintf("topology: DP indices ctx %d (of %d), gen %d (of %d) out of range", dc, mp.Ctx.DP, dg, mp.Gen.DP))
	}
}

// Fragments returns every fragment of a request assigned to CTX DP index dc
// and GEN DP index dg, ordered by GEN rank, then CTX rank, layer, block
// residue and head. The slice is fresh. It panics if dc or dg is out of range.
func (mp *Mapping) Fragments(dc, dg int) []Fragment {
	return mp.filter(dc, dg, func(Fragment) bool { return true })
}

// CtxFragments is the fragments that CTX rank ctxRank sends for a request of
// (dc, dg); empty if ctxRank is not in DP index dc or holds nothing the GEN
// side needs from it.
func (mp *Mapping) CtxFragments(dc, dg, ctxRank int) []Fragment {
	return mp.filter(dc, dg, func(f Fragment) bool { return f.CtxRank == ctxRank })
}

// GenFragments is the fragments that GEN rank genRank receives for a request
// of (dc, dg); empty if genRank is not in DP index dg.
func (mp *Mapping) GenFragments(dc, dg, genRank int) []Fragment {
	return mp.filter(dc, dg, func(f Fragment) bool { return f.GenRank == genRank })
}

func (mp *Mapping) filter(dc, dg int, keep func(Fragment) bool) []Fragment {
	mp.checkDP(dc, dg)
	cOff, gOff := dc*mp.Ctx.ReplicaRanks(), dg*mp.Gen.ReplicaRanks()
	var out []Fragment
	for _, f := range mp.base {
		f.CtxRank += cOff
		f.GenRank += gOff
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}

// CtxPeers is the CTX ranks that send to genRank for a request of (dc, dg),
// sorted, without duplicates.
func (mp *Mapping) CtxPeers(dc, dg, genRank int) []int {
	var out []int
	for _, f := range mp.GenFragments(dc, dg, genRank) {
		out = append(out, f.CtxRank)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// GenPeers is the GEN ranks that ctxRank sends to for a request of (dc, dg),
// sorted, without duplicates.
func (mp *Mapping) GenPeers(dc, dg, ctxRank int) []int {
	var out []int
	for _, f := range mp.CtxFragments(dc, dg, ctxRank) {
		out = append(out, f.GenRank)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// FragmentBytes is the payload size of f for a given number of covered blocks
// (see Fragment.BlockCount): layers*heads*2*TokensPerBlock*HeadBytes*blocks.
func (mp *Mapping) FragmentBytes(f Fragment, blocks int) int {
	return (f.LayerHi - f.LayerLo) * (f.HeadHi - f.HeadLo) * 2 * mp.Model.TokensPerBlock * mp.Model.HeadBytes() * blocks
}
