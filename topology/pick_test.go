package topology_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// pickRef is Pick as it was first written (one token at a time, the
// groups' best two by branches): the faster Pick and PickEach must route
// every token exactly as it did.
func pickRef(r topology.Routing, key uint64, experts []int, scratch []uint64) {
	if !(r.Groups > 1 && r.GroupsPerToken < r.Groups) {
		// Every expert open: the TopK best of independent uniform
		// scores are a uniform TopK-subset, drawn directly.
		h := key
		for n := 0; n < r.TopK; {
			h = splitmixRef(h)
			e := int(h % uint64(r.Experts))
			if !slices.Contains(experts[:n], e) {
				experts[n] = e
				n++
			}
		}
		return
	}
	// Scores are 32-bit uniforms, two from each hash; a group's is its
	// best two's sum, plus one so that a chosen group's 0 marks it.
	score, group, best := scratch[:r.Experts], scratch[r.Experts:r.Experts+r.Groups], scratch[r.Experts+r.Groups:r.Experts+r.Groups+r.TopK]
	h := key
	for e := 0; e < len(score); e += 2 {
		h = splitmixRef(h)
		score[e] = h >> 32
		if e+1 < len(score) {
			score[e+1] = h & math.MaxUint32
		}
	}
	size := r.Experts / r.Groups
	for g := range group {
		var first, second uint64
		for _, s := range score[g*size : (g+1)*size] {
			switch {
			case s > first:
				first, second = s, first
			case s > second:
				second = s
			}
		}
		group[g] = first + second + 1
	}
	// The GroupsPerToken best groups stay open; the TopK best experts
	// among theirs are kept in best[:n] (their scores) and experts[:n],
	// best first.
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
			s := score[e]
			if n == r.TopK && s <= best[n-1] {
				continue
			}
			i := min(n, r.TopK-1) // insert at i, shifting the worse down
			for i > 0 && best[i-1] < s {
				best[i], experts[i] = best[i-1], experts[i-1]
				i--
			}
			best[i], experts[i] = s, e
			n = min(n+1, r.TopK)
		}
	}
}

func splitmixRef(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Pick and PickEach route every token exactly as the reference does, for
// grouped and ungrouped routings, odd expert counts and key counts that
// are not a multiple of PickEach's four.
func TestPickMatchesTheReference(t *testing.T) {
	for _, r := range []topology.Routing{
		{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4},
		{Experts: 256, TopK: 8},
		{Experts: 96, TopK: 6, Groups: 8, GroupsPerToken: 2},
		{Experts: 15, TopK: 3, Groups: 5, GroupsPerToken: 2},
		{Experts: 64, TopK: 6, Groups: 16, GroupsPerToken: 2},
		{Experts: 32, TopK: 4, Groups: 4, GroupsPerToken: 3},
	} {
		t.Run(fmt.Sprintf("%+v", r), func(t *testing.T) {
			for _, n := range []int{1, 3, 4, 5, 8, 1001} {
				keys := make([]uint64, n)
				for i := range keys {
					keys[i] = uint64(i)*0x9E3779B97F4A7C15 ^ uint64(n)<<40
				}
				keys[0] = math.MaxUint64
				all := make([]int, n*r.TopK)
				r.PickEach(keys, all, make([]uint64, r.PickEachScratchLen()))
				want, got := make([]int, r.TopK), make([]int, r.TopK)
				for i, k := range keys {
					pickRef(r, k, want, make([]uint64, r.ScratchLen()))
					r.Pick(k, got, make([]uint64, r.ScratchLen()))
					require.Equal(t, want, got, "Pick, key %#x", k)
					require.Equal(t, want, all[i*r.TopK:(i+1)*r.TopK], "PickEach, key %d of %d", i, n)
				}
			}
		})
	}
}

// BenchmarkPickEach is DeepSeek-R1's grouped routing, per token.
func BenchmarkPickEach(b *testing.B) {
	r := topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}
	keys := make([]uint64, 4096)
	for i := range keys {
		keys[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	experts, scratch := make([]int, len(keys)*r.TopK), make([]uint64, r.PickEachScratchLen())
	for b.Loop() {
		r.PickEach(keys, experts, scratch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/token")
}
