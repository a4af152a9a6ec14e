package topology

// Groups. Every function returns instance ranks in increasing order and
// panics if rank is outside the layout. The result is a fresh slice. Each
// is computed from the rank's coordinates, in time proportional to the
// group's size (not the instance's): every rank of a large world asks.

// TPGroup is the ranks that differ from rank only in their TP index.
func (l Layout) TPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.vary(c, func(c *Coord) *int { return &c.TP }, l.TP)
}

// PPGroup is the ranks that differ from rank only in their PP index.
func (l Layout) PPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.vary(c, func(c *Coord) *int { return &c.PP }, l.PP)
}

// CPGroup is the ranks that differ from rank only in their CP index.
func (l Layout) CPGroup(rank int) []int {
	c := l.Coord(rank)
	return l.vary(c, func(c *Coord) *int { return &c.CP }, l.CP)
}

// DPGroup is the ranks of rank's DP index: the TP*PP*CP ranks that hold the
// KV of the requests assigned to that index (a replica without attention-DP).
// They are contiguous: [dp*ReplicaRanks(), (dp+1)*ReplicaRanks()).
func (l Layout) DPGroup(rank int) []int {
	c := l.Coord(rank)
	return span(c.DP*l.ReplicaRanks(), l.ReplicaRanks())
}

// DPPeers is the ranks at rank's (PP, CP, TP) position in every DP index
// (the classical data-parallel group: one rank per DP index).
func (l Layout) DPPeers(rank int) []int {
	c := l.Coord(rank)
	return l.vary(c, func(c *Coord) *int { return &c.DP }, l.DP)
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

// FFNIndex is rank's position among the FFN ranks of its stage and CP
// index, in [0, FFNRanks()): its TP index, or DP*TP + TP under
// attention-DP.
func (l Layout) FFNIndex(rank int) int {
	c := l.Coord(rank)
	if l.AttentionDP {
		return c.DP*l.TP + c.TP
	}
	return c.TP
}

// EPGroup is the ranks that hold one expert-TP index of the EP parts: the
// EP ranks of rank's stage and CP index (and DP index without
// attention-DP) whose FFN indices share FFNIndex/EP, as TensorRT-LLM's
// mapping numbers them (expert-parallel index f %% EP, expert-TP index
// f / EP). Member i holds the i-th EP part of the routed experts. The
// runtime exchanges each step's dispatch counts over it; the cost model
// charges the dispatch bytes to every FFN rank, since with expert TP > 1 a
// token goes to each expert-TP rank of a part it touches (the two agree at
// expert TP 1, as in the seed's layouts). Without EP it is rank alone.
func (l Layout) EPGroup(rank int) []int {
	c := l.Coord(rank)
	ep := l.Experts()
	lo := l.FFNIndex(rank) / ep * ep
	out := make([]int, ep)
	for i := range out {
		f := lo + i
		d := c
		if l.AttentionDP {
			d.DP, d.TP = f/l.TP, f%l.TP
		} else {
			d.TP = f
		}
		out[i] = l.RankOf(d)
	}
	return out
}

// All is every rank of the instance: [0, Ranks()).
func (l Layout) All() []int { return span(0, l.Ranks()) }

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
		out := make([]int, 0, l.PP*l.CP)
		for pp := range l.PP {
			for cp := range l.CP {
				out = append(out, l.RankOf(Coord{DP: c.DP, PP: pp, CP: cp, TP: c.TP}))
			}
		}
		return [][]int{out}
	}
	l.checkRank(rank)
	return [][]int{l.All()}
}

// vary lists the ranks whose coordinates equal c but for the one field
// selects, over [0, n). Ranks grow with every coordinate, so the list is
// in increasing order.
func (l Layout) vary(c Coord, field func(*Coord) *int, n int) []int {
	out := make([]int, n)
	for i := range n {
		*field(&c) = i
		out[i] = l.RankOf(c)
	}
	return out
}

// span is [first, first+n).
func span(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}
