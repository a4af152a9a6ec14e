package topology

// Groups. Every function returns instance ranks in increasing order and
// panics if rank is outside the layout. The result is a fresh slice.

// TPGroup is the ranks that differ from rank only in their TP index.
func (l Layout) TPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.collect(func(o Coord) bool { return o.DP == c.DP && o.PP == c.PP && o.CP == c.CP })
}

// PPGroup is the ranks that differ from rank only in their PP index.
func (l Layout) PPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.collect(func(o Coord) bool { return o.DP == c.DP && o.CP == c.CP && o.TP == c.TP })
}

// CPGroup is the ranks that differ from rank only in their CP index.
func (l Layout) CPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.collect(func(o Coord) bool { return o.DP == c.DP && o.PP == c.PP && o.TP == c.TP })
}

// DPGroup is the ranks of rank's DP index: the TP*PP*CP ranks that hold the
// KV of the requests assigned to that index (a replica without attention-DP).
// They are contiguous: [dp*ReplicaRanks(), (dp+1)*ReplicaRanks()).
func (l Layout) DPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.collect(func(o Coord) bool { return o.DP == c.DP })
}

// DPPeers is the ranks at rank's (PP, CP, TP) position in every DP index
// (the classical data-parallel group: one rank per DP index).
func (l Layout) DPPeers(rank int) []int {
	c := l.Coord(rank)
	return l.collect(func(o Coord) bool { return o.PP == c.PP && o.CP == c.CP && o.TP == c.TP })
}

// ExecutorGroup is the ranks that run one executor loop together (intake is
// broadcast over it): rank's DP index without attention-DP, the whole
// instance with it.
func (l Layout) ExecutorGroup(rank int) []int {
	if l.AttentionDP {
		l.checkRank(rank)
		return l.All()
	}
	return l.DPGroup(rank)
}

// All is every rank of the instance: [0, Ranks()).
func (l Layout) All() []int {
	return l.collect(func(Coord) bool { return true })
}

// CtxScopes is the sequence of groups over which a CTX rank runs the status
// consensus of DESIGN.md §4: its TP group, then its PP group; under
// attention-DP only its PP group (no TP hop). A scope of one rank needs no
// collective but is still listed, so every rank sees the same shape.
func (l Layout) CtxScopes(rank int) [][]int {
	if l.AttentionDP {
		return [][]int{l.PPGroup(rank)}
	}
	return [][]int{l.TPGroup(rank), l.PPGroup(rank)}
}

// GenScopes is the group over which a GEN rank runs the status consensus of
// DESIGN.md §4: the whole instance, or, under attention-DP, the PP x CP ranks
// of its DP index that share its TP index.
func (l Layout) GenScopes(rank int) [][]int {
	if l.AttentionDP {
		c := l.Coord(rank)
		return [][]int{l.collect(func(o Coord) bool { return o.DP == c.DP && o.TP == c.TP })}
	}
	l.checkRank(rank)
	return [][]int{l.All()}
}

func (l Layout) collect(keep func(Coord) bool) []int {
	var out []int
	for r := 0; r < l.Ranks(); r++ {
		if keep(l.Coord(r)) {
			out = append(out, r)
		}
	}
	return out
}
