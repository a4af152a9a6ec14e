package topology

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
)

// Routing is how an MoE model's tokens pick their routed experts, and so
// which expert-parallel parts a token is dispatched to. The runtime routes
// by it (Pick) and the cost model prices the dispatch by it (Parts): one
// description.
//
// A token's router gives every expert a score; the token takes its TopK
// best. With Groups set, the experts are Groups contiguous groups, a
// group's score is the sum of its two best experts' scores, and the token
// takes its TopK best experts from its GroupsPerToken best groups only
// (DeepSeek-V3's group-limited routing, arXiv:2412.19437 §2.1.2, and its
// "noaux_tc" router: n_group 8, topk_group 4, so a token's experts sit in
// at most 4 groups; with one group a node, on at most 4 nodes). The scores
// are independent and uniform, a pure function of the token: real routers
// are skewed and engines rebalance (EPLB, which also moves experts off
// their groups' ranks), and uniform routing is the model's middle.
type Routing struct {
	Experts        int
	TopK           int
	Groups         int // 0: no groups (every expert open to every token)
	GroupsPerToken int // groups a token's experts come from (with Groups)
}

// grouped reports whether r limits a token to some of its groups.
func (r Routing) grouped() bool { return r.Groups > 1 && r.GroupsPerToken < r.Groups }

// Grouped reports whether r limits a token to some of its groups: then
// Pick scores every expert (costly), else it draws a token's experts
// directly (cheap).
func (r Routing) Grouped() bool { return r.grouped() }

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

// ScratchLen is the length of the buffer Pick needs: one score per expert,
// per group and per pick for a grouped routing, none without groups.
func (r Routing) ScratchLen() int {
	if !r.grouped() {
		return 0
	}
	return r.Experts + r.Groups + r.TopK + r.GroupsPerToken*(r.Experts/r.Groups)
}

// Pick writes into experts[:TopK] the experts token key routes to: a pure
// function of the key, so every rank that knows the token routes it
// alike. scratch holds at least ScratchLen() values (reused across calls;
// unused without groups). r must be valid.
func (r Routing) Pick(key uint64, experts []int, scratch []uint64) {
	if !r.grouped() {
		// Every expert open: the TopK best of independent uniform
		// scores are a uniform TopK-subset, drawn directly.
		h := key
		for n := 0; n < r.TopK; {
			h = splitmix(h)
			e := int(h % uint64(r.Experts))
			if !contains(experts[:n], e) {
				experts[n] = e
				n++
			}
		}
		return
	}
	score := scratch[:r.Experts]
	scoreHashes(key, score)
	r.choose(score, scratch[r.Experts:r.ScratchLen()], experts)
}

// PickEach is Pick for each of keys: token i's experts go to
// experts[i*TopK:(i+1)*TopK]. scratch holds at least PickEachScratchLen()
// values. For a grouped routing the hash chains of four tokens at a time
// run side by side (each chain's every hash waits for the one before,
// the four do not wait for each other), which is where Pick's time goes.
func (r Routing) PickEach(keys []uint64, experts []int, scratch []uint64) {
	if !r.grouped() {
		for i, k := range keys {
			r.Pick(k, experts[i*r.TopK:(i+1)*r.TopK], nil)
		}
		return
	}
	n := r.ScratchLen()
	s0, s1, s2, s3 := scratch[:r.Experts], scratch[n:n+r.Experts], scratch[2*n:2*n+r.Experts], scratch[3*n:3*n+r.Experts]
	rest := scratch[r.Experts:n]
	i := 0
	for ; i+4 <= len(keys); i += 4 {
		h0, h1, h2, h3 := keys[i], keys[i+1], keys[i+2], keys[i+3]
		e := 0
		for ; e+2 <= r.Experts; e += 2 {
			h0, h1, h2, h3 = splitmix(h0), splitmix(h1), splitmix(h2), splitmix(h3)
			s0[e], s0[e+1] = h0>>32, h0&math.MaxUint32
			s1[e], s1[e+1] = h1>>32, h1&math.MaxUint32
			s2[e], s2[e+1] = h2>>32, h2&math.MaxUint32
			s3[e], s3[e+1] = h3>>32, h3&math.MaxUint32
		}
		if e < r.Experts { // an odd count: the last hash's high half
			s0[e], s1[e], s2[e], s3[e] = splitmix(h0)>>32, splitmix(h1)>>32, splitmix(h2)>>32, splitmix(h3)>>32
		}
		for j, sc := range [4][]uint64{s0, s1, s2, s3} {
			r.choose(sc, rest, experts[(i+j)*r.TopK:(i+j+1)*r.TopK])
		}
	}
	for ; i < len(keys); i++ {
		r.Pick(keys[i], experts[i*r.TopK:(i+1)*r.TopK], scratch)
	}
}

// PickEachScratchLen is the length of the buffer PickEach needs.
func (r Routing) PickEachScratchLen() int { return 4 * r.ScratchLen() }

// scoreHashes writes a grouped routing's scores for key: 32-bit
// uniforms, two from each hash of the chain from key.
func scoreHashes(key uint64, score []uint64) {
	h := key
	for e := 0; e < len(score); e += 2 {
		h = splitmix(h)
		score[e] = h >> 32
		if e+1 < len(score) {
			score[e+1] = h & math.MaxUint32
		}
	}
}

// choose writes into experts[:TopK] a grouped routing's experts for
// score (one per expert): a group's score is its best two's sum, plus one
// so that a chosen group's 0 marks it; the TopK best experts of the
// GroupsPerToken best groups, best first, an earlier expert of the scan
// (best group first, then by index) first among equal scores. rest holds
// Groups + TopK + GroupsPerToken*Experts/Groups values.
func (r Routing) choose(score, rest []uint64, experts []int) {
	size := r.Experts / r.Groups
	group, best, cand := rest[:r.Groups], rest[r.Groups:r.Groups+r.TopK], rest[r.Groups+r.TopK:]
	for g := range group {
		// The best two of the group, over two halves at a time (two
		// chains of max and min that do not wait for each other).
		var f0, s0, f1, s1 uint64
		sc := score[g*size : (g+1)*size]
		i := 0
		for ; i+2 <= len(sc); i += 2 {
			a, b := sc[i], sc[i+1]
			s0, f0 = max(s0, min(f0, a)), max(f0, a)
			s1, f1 = max(s1, min(f1, b)), max(f1, b)
		}
		if i < len(sc) {
			s0, f0 = max(s0, min(f0, sc[i])), max(f0, sc[i])
		}
		group[g] = max(f0, f1) + max(min(f0, f1), s0, s1) + 1
	}
	// The candidates, in the scan's order: every expert of the
	// GroupsPerToken best groups, best group first.
	n := 0
	for range r.GroupsPerToken {
		top := 0
		for g, s := range group {
			if s > group[top] {
				top = g
			}
		}
		group[top] = 0
		for e := top * size; e < (top+1)*size; e++ {
			cand[n] = uint64(e)
			n++
		}
	}
	cand = cand[:n]
	// A bound the TopK-th best candidate is at least: the TopK-th best of
	// a few candidates' scores is no more than the TopK-th best of all.
	// Keeping only those at or above it (in scan order, branch-free)
	// leaves the same TopK best, and the insertion below runs over a
	// handful instead of every candidate.
	floor := uint64(0)
	if len(cand) > 4*r.TopK {
		floor = kthBest(score, cand[:2*r.TopK], r.TopK, best)
	}
	k := 0
	for _, e := range cand {
		cand[k] = e
		if score[e] >= floor {
			k++
		}
	}
	// The TopK best of what is left, kept in best[:m] (their scores) and
	// experts[:m], best first; a later equal score goes after.
	m := 0
	for _, e := range cand[:k] {
		s := score[e]
		if m == r.TopK && s <= best[m-1] {
			continue
		}
		i := min(m, r.TopK-1) // insert at i, shifting the worse down
		for i > 0 && best[i-1] < s {
			best[i], experts[i] = best[i-1], experts[i-1]
			i--
		}
		best[i], experts[i] = s, int(e)
		m = min(m+1, r.TopK)
	}
}

// kthBest is the k-th best score of the experts in es (len(es) >= k), with
// buf (k values) as scratch.
func kthBest(score, es []uint64, k int, buf []uint64) uint64 {
	m := 0
	for _, e := range es {
		s := score[e]
		if m == k && s <= buf[m-1] {
			continue
		}
		i := min(m, k-1)
		for i > 0 && buf[i-1] < s {
			buf[i] = buf[i-1]
			i--
		}
		buf[i] = s
		m = min(m+1, k)
	}
	return buf[k-1]
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

// partSample is how many tokens Parts routes for a grouped routing (its
// mean's standard error is under 0.3% of it), fewer when Pick's work for
// them all would pass partWork steps (but never under 256).
const (
	partSample = 8192
	partWork   = 1 << 24
)

// partsCache holds Parts of grouped routings, computed once each.
var partsCache sync.Map // partsKey -> float64

type partsKey struct {
	r     Routing
	parts int
}

// Parts is the expected number of distinct EP parts (of parts, each a
// contiguous range of Experts/parts experts) one token's experts fall in
// under Pick's routing. Without groups it is exact: a part is missed when
// none of TopK draws without replacement lands in it. With groups it is
// the mean over Pick's routing of a fixed sample of tokens (keys 0 to
// partSample-1, fewer for very large models), computed once per routing
// and part count: deterministic, and within about 0.3% of the expectation.
// r must be valid for parts.
func (r Routing) Parts(parts int) float64 {
	per := r.Experts / parts
	if !r.grouped() {
		return float64(parts) * (1 - missAll(r.Experts, per, r.TopK))
	}
	k := partsKey{r, parts}
	if v, ok := partsCache.Load(k); ok {
		return v.(float64)
	}
	size := r.Experts / r.Groups
	step := 2*r.Experts + r.Groups*r.GroupsPerToken + r.GroupsPerToken*size // one Pick
	n := max(256, min(partSample, partWork/step))
	const chunk = 256
	keys := make([]uint64, chunk)
	experts, scratch := make([]int, chunk*r.TopK), make([]uint64, r.PickEachScratchLen())
	seen := make([]int, parts) // seen[p] == key+1: the token reached p
	var sum int
	for k0 := 0; k0 < n; k0 += chunk {
		m := min(chunk, n-k0)
		for j := range m {
			keys[j] = uint64(k0 + j)
		}
		r.PickEach(keys[:m], experts[:m*r.TopK], scratch)
		for j := range m {
			key := k0 + j
			for _, e := range experts[j*r.TopK : (j+1)*r.TopK] {
				if p := e / per; seen[p] != key+1 {
					seen[p] = key + 1
					sum++
				}
			}
		}
	}
	v := float64(sum) / float64(n)
	partsCache.Store(k, v)
	return v
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

// ParseExperts parses a synthetic routing, "E/K": E routed experts, K of
// them per token, uniform and ungrouped (for runs without a model's own).
func ParseExperts(s string) (Routing, error) {
	e, k, ok := strings.Cut(strings.TrimSpace(s), "/")
	ne, err1 := strconv.Atoi(e)
	nk, err2 := strconv.Atoi(k)
	if !ok || err1 != nil || err2 != nil {
		return Routing{}, fmt.Errorf("%w: experts %q: want E/K (E routed experts, K per token), e.g. 8/2", ErrInvalidModel, s)
	}
	r := Routing{Experts: ne, TopK: nk}
	if err := r.Validate(1); err != nil {
		return Routing{}, err
	}
	return r, nil
}

// ExpertsString is r as ParseExperts reads it ("" for no routing).
func (r Routing) ExpertsString() string {
	if r.Experts == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", r.Experts, r.TopK)
}
