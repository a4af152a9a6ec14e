package explore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
)

// Case is one case of the layout space, with what it covers.
type Case struct {
	scenario.Scenario
	Side     string // the side whose layout family the case stands for: ctx or gen
	Family   string // that side's layout family (topology.Layout.Family)
	Transfer string // async or sync
	// Fault is the fault placed (one of scenario.FaultSpecs, KIND@SIDE),
	// Position where (one of scenario.FaultPositions); both "" in a
	// healthy case.
	Fault, Position string
}

// Space generates the layout space a search covers:
//
//   - healthy cases: for every layout family of up to maxRanks ranks
//     (topology.Enumerate: tp, pp, cp, dp, adp and their combinations), on
//     each side, one of its layouts (drawn by rng) with a compatible
//     partner, async and sync;
//   - fault cases: every fault of scenario.FaultSpecs (each kind on each
//     side it applies to) at every position of scenario.FaultPositions
//     (the replica's first, middle and last rank, world rank 0) where it
//     can be placed, async and sync, each on a layout of the faulted
//     side's families taken in turn (so the faults spread over the
//     families), with the outcome it must have.
//
// The order is shuffled by rng, so that a search that stops early still
// covers a spread of the space; a search that must cover it all runs every
// case (TestExploreLayoutSpace does, and asserts it).
func Space(maxRanks int, rng *rand.Rand) []Case {
	m := scenario.DefaultModel
	all := topology.Enumerate(m, maxRanks)
	families := map[string][]topology.Layout{}
	var names []string
	for _, l := range all {
		f := l.Family()
		if families[f] == nil {
			names = append(names, f)
		}
		families[f] = append(families[f], l)
	}
	slices.Sort(names)
	partnerOf := func(l topology.Layout) topology.Layout {
		p := all[rng.IntN(len(all))]
		for !topology.Compatible(l, p, m) || !topology.Compatible(p, l, m) {
			p = all[rng.IntN(len(all))]
		}
		return p
	}
	pair := func(side string, l, partner topology.Layout) (topology.Layout, topology.Layout) {
		if side == "gen" {
			return partner, l
		}
		return l, partner
	}
	var out []Case
	for _, side := range []string{"ctx", "gen"} {
		for _, fam := range names {
			l := families[fam][rng.IntN(len(families[fam]))]
			for _, transfer := range []string{"async", "sync"} {
				ctxL, genL := pair(side, l, partnerOf(l))
				out = append(out, Case{Scenario: spaceCase(ctxL, genL, transfer, "", rng), Side: side, Family: fam, Transfer: transfer})
			}
		}
	}
	k := 0 // the next family to place a fault on
	for _, spec := range scenario.FaultSpecs {
		_, side, _ := strings.Cut(spec, "@")
		for _, pos := range scenario.FaultPositions {
			for _, transfer := range []string{"async", "sync"} {
				// The families in turn from k, until one has the
				// position (world0 and middle need a layout that has
				// them); none may (world0 on the GEN side).
				for try := range names {
					fam := names[(k+try)%len(names)]
					l := families[fam][rng.IntN(len(families[fam]))]
					ctxL, genL := pair(side, l, partnerOf(l))
					s := spaceCase(ctxL, genL, transfer, spec+"/"+pos, rng)
					ok, err := s.InjectFault(spec, pos, rng)
					if err != nil {
						panic(err)
					}
					if ok {
						out = append(out, Case{Scenario: s, Side: side, Family: fam, Transfer: transfer, Fault: spec, Position: pos})
						k += try + 1
						break
					}
				}
			}
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// spaceCase is one case of the space: a small workload that must complete
// (a fault, injected afterwards, sets its own expectations).
func spaceCase(ctxL, genL topology.Layout, transfer, fault string, rng *rand.Rand) scenario.Scenario {
	if fault == "" {
		fault = "none"
	}
	s := scenario.New(fmt.Sprintf("ctx=%s/gen=%s/%s/%s", ctxL, genL, transfer, fault))
	s.Ctx, s.Gen, s.Transfer = ctxL.String(), genL.String(), transfer
	s.Requests, s.Input, s.Output, s.InputJitter = 8, 40, 2, 0.5
	s.Seed = rng.Uint64N(1 << 20)
	s.CollectiveTimeout, s.StallTimeout, s.Timeout = 2*time.Second, 5*time.Second, 45*time.Second
	for _, l := range []string{"ok", fmt.Sprintf("completed == %d", s.Requests)} {
		if err := s.Expect.Add(l); err != nil {
			panic(err)
		}
	}
	return s
}
