package topology

import "fmt"

// Routing is how an MoE model's tokens pick their routed experts, and so
// which expert-parallel parts a token is dispatched to. The runtime routes
// by it (Pick) and the cost model prices the dispatch by it (Parts): one
// description.
//
// A token picks TopK distinct experts of Experts. With Groups set, the
// experts are Groups contiguous groups, and a token first picks
// GroupsPerToken distinct groups, then its TopK experts among those
// groups' experts (DeepSeek-V3's group-limited routing: n_group 8,
// topk_group 4, so a token's experts sit in at most 4 groups; with one
// group a node, on at most 4 nodes, arXiv:2412.19437 §2.1.2). Every pick
// is uniform: real routers are skewed and engines rebalance (EPLB), and
// uniform routing is the model's middle.
type Routing struct {
	Experts        int
	TopK           int
	Groups         int // 0: no groups (every expert open to every token)
	GroupsPerToken int // groups a token's experts come from (with Groups)
}

// grouped reports whether r limits a token to some of its groups.
func (r Routing) grouped() bool { return r.Groups > 1 && r.GroupsPerToken < r.Groups }

// Validate names the first field that breaks its rule, for routing over
// parts EP parts (contiguous ranges of Experts/parts experts each).
func (r Routing) Validate(parts int) error {
	switch {
	case r.Experts < 1:
		return fmt.Errorf("%w: routing: experts = %d: must be > 0", ErrInvalidModel, r.Experts)
	case parts < 1 || r.Experts%parts != 0:
		return fmt.Errorf("%w: routing: experts = %d: the %d EP parts must divide it", ErrInvalidModel, r.Experts, parts)
	case r.TopK < 1 || r.TopK > r.Experts:
		return fmt.Errorf("%w: routing: experts per token = %d: must be in [1, experts (%d)]", ErrInvalidModel, r.TopK, r.Experts)
	case r.Groups < 0 || r.Groups > r.Experts || (r.Groups > 0 && r.Experts%r.Groups != 0):
		return fmt.Errorf("%w: routing: groups = %d: must be 0 (none) or divide experts (%d)", ErrInvalidModel, r.Groups, r.Experts)
	case r.Groups == 0 && r.GroupsPerToken != 0:
		return fmt.Errorf("%w: routing: groups per token = %d: must be 0 without groups", ErrInvalidModel, r.GroupsPerToken)
	case r.Groups > 0 && (r.GroupsPerToken < 1 || r.GroupsPerToken > r.Groups):
		return fmt.Errorf("%w: routing: groups per token = %d: must be in [1, groups (%d)]", ErrInvalidModel, r.GroupsPerToken, r.Groups)
	case r.Groups > 0 && r.GroupsPerToken*(r.Experts/r.Groups) < r.TopK:
		return fmt.Errorf("%w: routing: groups per token = %d: its groups hold %d experts, fewer than the %d a token picks", ErrInvalidModel, r.GroupsPerToken, r.GroupsPerToken*(r.Experts/r.Groups), r.TopK)
	}
	return nil
}

// Pick writes into experts[:TopK] the experts token key routes to: a pure
// function of the key, so every rank that knows the token routes it
// alike. groups is scratch of at least GroupsPerToken entries (unused
// without groups). r must be valid.
func (r Routing) Pick(key uint64, experts, groups []int) {
	h := key
	pool, per := r.Experts, 0
	if r.grouped() {
		per = r.Experts / r.Groups
		pool = r.GroupsPerToken * per
		for n := 0; n < r.GroupsPerToken; {
			h = splitmix(h)
			g := int(h % uint64(r.Groups))
			if !contains(groups[:n], g) {
				groups[n] = g
				n++
			}
		}
	}
	for n := 0; n < r.TopK; {
		h = splitmix(h)
		e := int(h % uint64(pool))
		if per > 0 {
			e = groups[e/per]*per + e%per
		}
		if !contains(experts[:n], e) {
			experts[n] = e
			n++
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Parts is the expected number of distinct EP parts (of parts, each a
// contiguous range of Experts/parts experts) one token's experts fall in,
// exactly, for Pick's routing: a part is missed when none of the TopK
// draws without replacement from the token's pool lands in it, and with
// groups, the part's experts in the pool depend on which of its groups
// the token picked (a hypergeometric count over the groups, summed by
// dynamic programming). r must be valid for parts.
func (r Routing) Parts(parts int) float64 {
	per := r.Experts / parts
	if !r.grouped() {
		return float64(parts) * (1 - missAll(r.Experts, per, r.TopK))
	}
	size := r.Experts / r.Groups
	pool := r.GroupsPerToken * size
	var sum float64
	for p := range parts {
		lo, hi := p*per, (p+1)*per
		// dist[j][m]: over the first groups seen, the chance that j of
		// them are picked and hold m of part p's experts.
		dist := make([][]float64, r.GroupsPerToken+1)
		for j := range dist {
			dist[j] = make([]float64, per+1)
		}
		dist[0][0] = 1
		for g := range r.Groups {
			in := max(0, min(hi, (g+1)*size)-max(lo, g*size)) // part p's experts in group g
			for j := min(g+1, r.GroupsPerToken); j >= 1; j-- {
				for m := per; m >= in; m-- {
					dist[j][m] += dist[j-1][m-in]
				}
			}
		}
		// Every set of GroupsPerToken groups is equally likely.
		var miss, sets float64
		for m, w := range dist[r.GroupsPerToken] {
			sets += w
			miss += w * missAll(pool, m, r.TopK)
		}
		sum += 1 - miss/sets
	}
	return sum
}

// missAll is the chance that k draws without replacement from n items
// miss all of m given ones: C(n-m, k) / C(n, k).
func missAll(n, m, k int) float64 {
	q := 1.0
	for i := range k {
		if n-m-i <= 0 {
			return 0
		}
		q *= float64(n-m-i) / float64(n-i)
	}
	return q
}
