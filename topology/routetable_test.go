package topology_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// ksStat is the two-sample Kolmogorov-Smirnov statistic of integer
// samples a and b: the largest gap between their empirical CDFs.
func ksStat(a, b []int) float64 {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	var d float64
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		x := math.MaxInt
		if i < len(a) {
			x = a[i]
		}
		if j < len(b) && b[j] < x {
			x = b[j]
		}
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

// A route table's tokens load the experts, and the EP parts, as Pick's
// do (grouped routings: the others route by Pick itself): over 10^4 steps of 64 tokens each, routed exactly (Pick) and by the
// table (other tokens), the loads of a first, a middle and a last expert,
// and a step's token copies on the first and last of 4 and of 8 parts,
// pass a two-sample Kolmogorov-Smirnov test at 1e-4 (the samples are
// seeded: the verdict is the same every run). A table that drops each
// token's best expert (make mutate: route-table-drops-an-expert) moves
// every one of them far past it.
func TestRouteTableFollowsPicksLaw(t *testing.T) {
	const steps, perStep = 10000, 64
	crit := math.Sqrt(-math.Log(1e-4/2)/2) * math.Sqrt(2.0/steps)
	for _, r := range []topology.Routing{
		{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4},
		{Experts: 64, TopK: 6, Groups: 16, GroupsPerToken: 2},
		{Experts: 96, TopK: 6, Groups: 8, GroupsPerToken: 2},
	} {
		t.Run(fmt.Sprintf("%+v", r), func(t *testing.T) {
			table := r.Table()
			experts, scratch := make([]int, r.TopK), make([]uint64, r.ScratchLen())
			watch := []int{0, r.Experts/2 + 1, r.Experts - 1}
			type stat struct {
				name         string
				exact, table []int
			}
			stats := []*stat{}
			for _, e := range watch {
				stats = append(stats, &stat{name: fmt.Sprintf("load of expert %d", e)})
			}
			for _, parts := range []int{4, 8} {
				stats = append(stats, &stat{name: fmt.Sprintf("copies on part 0 of %d", parts)}, &stat{name: fmt.Sprintf("copies on part %d of %d", parts-1, parts)})
			}
			tally := func(key uint64, exact bool, loads []int) {
				var es []int
				if exact {
					r.Pick(key, experts, scratch)
					es = experts
				} else {
					for _, e := range table.Experts(key) {
						es = append(es, int(e))
					}
				}
				for i, w := range watch {
					if slices.Contains(es, w) {
						loads[i]++
					}
				}
				k := len(watch)
				for _, parts := range []int{4, 8} {
					per := r.Experts / parts
					for _, p := range []int{0, parts - 1} {
						if slices.ContainsFunc(es, func(e int) bool { return e/per == p }) {
							loads[k]++
						}
						k++
					}
				}
			}
			for s := range steps {
				le, lt := make([]int, len(stats)), make([]int, len(stats))
				for i := range perStep {
					// Distinct keys for each side: independent samples.
					tally(uint64(s)<<20|uint64(i), true, le)
					tally(uint64(s)<<20|uint64(i)|1<<19, false, lt)
				}
				for i, st := range stats {
					st.exact, st.table = append(st.exact, le[i]), append(st.table, lt[i])
				}
			}
			for _, st := range stats {
				d := ksStat(st.exact, st.table)
				t.Logf("%s: D = %.4f (critical %.4f)", st.name, d, crit)
				require.Less(t, d, crit, "%s: the table's law is not Pick's", st.name)
			}
		})
	}
}

// A token's table routing is a pure function of its key, one of the
// TableSize representatives' exact routings; every representative is
// reached.
func TestRouteTableIsPicksOfItsRepresentatives(t *testing.T) {
	r := topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}
	table := r.Table()
	require.Same(t, table, r.Table(), "built once")
	experts, scratch := make([]int, r.TopK), make([]uint64, r.ScratchLen())
	seen := map[string]bool{}
	for key := range uint64(3 * topology.TableSize) {
		got := table.Experts(key)
		require.Equal(t, got, table.Experts(key))
		seen[fmt.Sprint(got)] = true
	}
	require.Greater(t, len(seen), topology.TableSize*9/10, "the keys reach most representatives")
	// The representatives are Pick's: key 7's experts are one of them.
	r.Pick(7, experts, scratch)
	want := make([]uint16, r.TopK)
	for i, e := range experts {
		want[i] = uint16(e)
	}
	require.True(t, seen[fmt.Sprint(want)], "a representative's routing is Pick's")
}
