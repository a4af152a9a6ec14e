package consensus

import (
	"math"
	"math/rand/v2"
	"slices"
)

// The brute-force reference: enumerate every id anyone mentioned and count,
// per id, how many ranks list it. No sorting tricks, no merging, no folding.

func bruteReady(perRank [][]uint64) []uint64 {
	count := map[uint64]int{}
	for _, ids := range perRank {
		seen := map[uint64]bool{}
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				count[id]++
			}
		}
	}
	var out []uint64
	for id, n := range count {
		if n == len(perRank) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func bruteDecide(votes []Vote) Outcome {
	type counts struct{ c, f, d, q int }
	per := map[uint64]*counts{}
	get := func(id uint64) *counts {
		if per[id] == nil {
			per[id] = &counts{}
		}
		return per[id]
	}
	has := func(l []uint64, id uint64) bool { return slices.Contains(l, id) }
	all := map[uint64]bool{}
	for _, v := range votes {
		for _, l := range [][]uint64{v.Cancelled, v.Failed, v.Completed, v.Quiesced} {
			for _, id := range l {
				all[id] = true
			}
		}
	}
	for id := range all {
		for _, v := range votes {
			k := get(id)
			if has(v.Cancelled, id) {
				k.c++
			}
			if has(v.Failed, id) {
				k.f++
			}
			if has(v.Completed, id) {
				k.d++
			}
			if has(v.Quiesced, id) {
				k.q++
			}
		}
	}
	var out Outcome
	n := len(votes)
	for id, k := range per {
		switch {
		case k.c > 0:
			out.Cancelled = append(out.Cancelled, id)
		case k.f > 0:
			out.Failed = append(out.Failed, id)
		case k.d == n:
			out.Completed = append(out.Completed, id)
		}
		if k.q == n {
			out.Quiesced = append(out.Quiesced, id)
		}
	}
	slices.Sort(out.Cancelled)
	slices.Sort(out.Failed)
	slices.Sort(out.Completed)
	slices.Sort(out.Quiesced)
	return out
}

// genIDs draws up to max ids (duplicates likely) from a small universe, so
// that ranks overlap, sometimes shifted to the top of the uint64 range to
// exercise ids whose int64 bit pattern is negative.
func genIDs(rng *rand.Rand, universe, max int, base uint64) []uint64 {
	n := rng.IntN(max + 1)
	if rng.IntN(8) == 0 {
		n = 0 // plenty of empty lists
	}
	ids := make([]uint64, 0, n)
	for range n {
		ids = append(ids, base+uint64(rng.IntN(universe)))
	}
	return ids
}

func genBase(rng *rand.Rand) uint64 {
	switch rng.IntN(3) {
	case 0:
		return 0
	case 1:
		return 1 << 40
	default:
		return math.MaxUint64 - 64
	}
}

// genVotes builds n ranks' votes over a shared universe. Completed and
// quiesced are biased towards a common core so the intersections are not
// always empty; every rank draws its own lengths (divergent session counts).
func genVotes(rng *rand.Rand, n int) []Vote {
	universe := 1 + rng.IntN(40)
	base := genBase(rng)
	core := genIDs(rng, universe, 20, base)
	votes := make([]Vote, n)
	for r := range votes {
		v := Vote{
			Cancelled: genIDs(rng, universe, 3, base),
			Failed:    genIDs(rng, universe, 4, base),
			Completed: append(slices.Clone(core), genIDs(rng, universe, 8, base)...),
			Quiesced:  append(slices.Clone(core), genIDs(rng, universe, 8, base)...),
		}
		// Drop some core ids on some ranks: those must fall out of the
		// intersections.
		if rng.IntN(3) == 0 && len(v.Completed) > 0 {
			v.Completed = v.Completed[rng.IntN(len(v.Completed)):]
		}
		if rng.IntN(3) == 0 && len(v.Quiesced) > 0 {
			v.Quiesced = v.Quiesced[:rng.IntN(len(v.Quiesced))]
		}
		rng.Shuffle(len(v.Completed), func(i, j int) { v.Completed[i], v.Completed[j] = v.Completed[j], v.Completed[i] })
		votes[r] = v
	}
	return votes
}

func genReady(rng *rand.Rand, n int) [][]uint64 {
	universe := 1 + rng.IntN(40)
	base := genBase(rng)
	core := genIDs(rng, universe, 20, base)
	per := make([][]uint64, n)
	for r := range per {
		ids := append(slices.Clone(core), genIDs(rng, universe, 10, base)...)
		if rng.IntN(3) == 0 && len(ids) > 0 {
			ids = ids[rng.IntN(len(ids)):]
		}
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		per[r] = ids
	}
	return per
}

// canon makes empty lists nil so results compare by content.
func canon(o Outcome) Outcome {
	return Outcome{nilIfEmpty(o.Cancelled), nilIfEmpty(o.Failed), nilIfEmpty(o.Completed), nilIfEmpty(o.Quiesced)}
}

func cloneOutcome(o Outcome) Outcome {
	return canon(Outcome{slices.Clone(o.Cancelled), slices.Clone(o.Failed), slices.Clone(o.Completed), slices.Clone(o.Quiesced)})
}
