package explore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
)

// Space generates the layout space a search covers: for every layout
// family of up to maxRanks ranks (topology.Enumerate: tp, pp, cp, dp, adp
// and their combinations), on each side, a case pairing one of its layouts
// (drawn by rng) with a compatible partner, async and sync, each once
// without a fault and once with a fault (scenario.InjectFault; the kinds
// taken in turn, so every kind meets both sides), each with
// the outcome it must have. The order is shuffled by rng, so that a budget
// that ends early still covers a spread of the space.
func Space(maxRanks int, rng *rand.Rand) []scenario.Scenario {
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
	kinds := scenario.FaultKinds
	var out []scenario.Scenario
	k := 0
	for _, side := range []string{"ctx", "gen"} {
		for _, fam := range names {
			l := families[fam][rng.IntN(len(families[fam]))]
			for _, transfer := range []string{"async", "sync"} {
				partner := all[rng.IntN(len(all))]
				for !topology.Compatible(l, partner, m) || !topology.Compatible(partner, l, m) {
					partner = all[rng.IntN(len(all))]
				}
				ctxL, genL := l, partner
				if side == "gen" {
					ctxL, genL = partner, l
				}
				// Without a fault, and with the next fault kind in turn:
				// across the families every kind meets every side.
				kind := kinds[k%len(kinds)]
				k++
				for _, kd := range []string{"", kind} {
					if s, ok := spaceCase(ctxL, genL, transfer, kd, rng); ok {
						out = append(out, s)
					}
				}
			}
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// spaceCase is one case of the space: a small workload, and the fault
// kind's expectations (a healthy run without one).
func spaceCase(ctxL, genL topology.Layout, transfer, kind string, rng *rand.Rand) (scenario.Scenario, bool) {
	name := fmt.Sprintf("ctx=%s/gen=%s/%s/%s", ctxL, genL, transfer, kind)
	if kind == "" {
		name = fmt.Sprintf("ctx=%s/gen=%s/%s/none", ctxL, genL, transfer)
	}
	s := scenario.New(name)
	s.Ctx, s.Gen, s.Transfer = ctxL.String(), genL.String(), transfer
	s.Requests, s.Input, s.Output, s.InputJitter = 8, 40, 2, 0.5
	s.Seed = rng.Uint64N(1 << 20)
	s.CollectiveTimeout, s.StallTimeout, s.Timeout = 2*time.Second, 5*time.Second, 45*time.Second
	if kind == "" {
		for _, l := range []string{"ok", fmt.Sprintf("completed == %d", s.Requests)} {
			if err := s.Expect.Add(l); err != nil {
				panic(err)
			}
		}
		return s, true
	}
	ok, err := s.InjectFault(kind, rng)
	if err != nil {
		panic(err)
	}
	return s, ok
}
