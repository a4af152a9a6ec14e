package explore_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/topology"
)

var (
	spaceBudget = flag.Duration("explore.budget", 0, "TestExploreLayoutSpace: wall-clock budget (0: skip the test)")
	spaceSeeds  = flag.Int("explore.seeds", 1, "TestExploreLayoutSpace: schedules per case")
	spaceRanks  = flag.Int("explore.ranks", 8, "TestExploreLayoutSpace: most ranks on each side")
	spaceSeed   = flag.Uint64("explore.seed", 1, "TestExploreLayoutSpace: the seed that draws the space and its schedules")
)

// The generated layout space (every layout family on each side, async and
// sync, with and without each fault kind) runs healthy under the budget's
// schedules: make test-explore (a few minutes), make soak (longer). A
// failure prints the line that replays it.
func TestExploreLayoutSpace(t *testing.T) {
	if *spaceBudget == 0 {
		t.Skip("set -explore.budget (make test-explore, make soak)")
	}
	rng := rand.New(rand.NewPCG(*spaceSeed, 0x5eed))
	cases := explore.Space(*spaceRanks, rng)
	start := time.Now()
	families := map[string]bool{}
	ran, schedules := 0, 0
	for i, s := range cases {
		if time.Since(start) > *spaceBudget {
			break
		}
		// Half the cases walk at random, half take PCT priority schedules.
		o := explore.Options{Seeds: *spaceSeeds, Start: *spaceSeed*1000 + uint64(i)*uint64(*spaceSeeds)}
		if i%2 == 1 {
			o.Strategy = sim.PCT
		}
		res := explore.Run(context.Background(), s, false, o)
		ran++
		schedules += res.Schedules
		for _, l := range []string{s.Ctx, s.Gen} {
			lay, err := topology.ParseLayout(l)
			if err == nil {
				families[lay.Family()] = true
			}
		}
		if res.First != nil {
			t.Errorf("case %d %s: %v", i, s.Name, res.First)
		}
	}
	var fams []string
	for f := range families {
		fams = append(fams, f)
	}
	t.Logf("%d of %d cases, %d schedules, %d layout families, in %v: %s", ran, len(cases), schedules,
		len(fams), time.Since(start).Round(time.Second), strings.Join(fams, " "))
}
