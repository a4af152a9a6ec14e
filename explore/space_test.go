package explore_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
)

var (
	spaceBudget = flag.Duration("explore.budget", 0, "TestExploreLayoutSpace: wall-clock budget for schedules beyond each case's first (0: skip the test)")
	spaceSeeds  = flag.Int("explore.seeds", 1, "TestExploreLayoutSpace: most schedules per case")
	spaceRanks  = flag.Int("explore.ranks", 8, "TestExploreLayoutSpace: most ranks on each side")
	spaceSeed   = flag.Uint64("explore.seed", 1, "TestExploreLayoutSpace: the seed that draws the space and its schedules")
)

// found tallies what the search found for one fault at one position.
type found struct {
	cases, schedules int
	outcomes         map[string]int
}

// The generated layout space (every layout family on each side, async and
// sync, healthy; every fault kind on each side it applies to at every rank
// position, async and sync) runs healthy, or with the fault's outcome, under
// random and PCT schedules: make test-explore (a minute or two), make soak
// (longer). Every case runs its first schedule whatever the budget, so
// what the test covers does not depend on the host's speed, and it asserts
// what it covered; the budget only buys more schedules per case. A fault
// that ends the run (exit, stall-long) must name the faulted rank's world
// rank. A failure prints the line that replays it; the log has a table of
// what each fault at each position found.
func TestExploreLayoutSpace(t *testing.T) {
	if *spaceBudget == 0 {
		t.Skip("set -explore.budget (make test-explore, make soak)")
	}
	rng := rand.New(rand.NewPCG(*spaceSeed, 0x5eed))
	cases := explore.Space(*spaceRanks, rng)
	start := time.Now()
	covered := map[string]bool{} // what ran, as keys (see want below)
	table := map[string]*found{}
	schedules := 0
	strategies := map[sim.Strategy]bool{}
	runCase := func(i int, c explore.Case, first uint64, n int) {
		// Half the cases walk at random, half take PCT priority schedules.
		o := explore.Options{Seeds: n, Start: first}
		if i%2 == 1 {
			o.Strategy = sim.PCT
		}
		strategies[o.Strategy] = true
		o.Observe = func(seed uint64, out scenario.Outcome) {
			if c.Fault == "" {
				return
			}
			f := table[c.Fault+" "+c.Position]
			f.schedules++
			what, named := outcomeOf(c, out)
			f.outcomes[what]++
			if !named {
				p := pinned(c, o, seed)
				t.Errorf("case %d %s: %s ended the run without naming the faulted rank: %s\n  replay: %s", i, c.Name, c.Fault, what,
					p.CommandLineOn("sim", false))
			}
		}
		res := explore.Run(context.Background(), c.Scenario, false, o)
		schedules += res.Schedules
		if res.First != nil {
			t.Errorf("case %d %s: %v", i, c.Name, res.First)
		}
	}
	// Every case once.
	for i, c := range cases {
		if c.Fault != "" {
			if table[c.Fault+" "+c.Position] == nil {
				table[c.Fault+" "+c.Position] = &found{outcomes: map[string]int{}}
			}
			table[c.Fault+" "+c.Position].cases++
			covered["fault "+c.Fault+" "+c.Position+" "+c.Transfer] = true
		} else {
			covered["family "+c.Side+" "+c.Family+" "+c.Transfer] = true
		}
		runCase(i, c, *spaceSeed*1000+uint64(i)*uint64(*spaceSeeds), 1)
	}
	firstPass := time.Since(start)
	// Then more schedules per case while the budget lasts.
	more := 0
	for extra := 1; extra < *spaceSeeds && time.Since(start) < *spaceBudget; extra++ {
		for i, c := range cases {
			if time.Since(start) >= *spaceBudget {
				break
			}
			runCase(i, c, *spaceSeed*1000+uint64(i)*uint64(*spaceSeeds)+uint64(extra), 1)
			more++
		}
	}

	// What must have run: every family on each side, every fault at
	// every position it has, each in both modes, under both strategies.
	var want []string
	families := map[string]bool{}
	for _, l := range topology.Enumerate(scenario.DefaultModel, *spaceRanks) {
		families[l.Family()] = true
	}
	for _, tr := range []string{"async", "sync"} {
		for _, side := range []string{"ctx", "gen"} {
			for f := range families {
				want = append(want, "family "+side+" "+f+" "+tr)
			}
		}
		for _, spec := range scenario.FaultSpecs {
			for _, pos := range scenario.FaultPositions {
				if pos == "world0" && strings.HasSuffix(spec, "@gen") {
					continue // world rank 0 is a CTX rank
				}
				want = append(want, "fault "+spec+" "+pos+" "+tr)
			}
		}
	}
	sort.Strings(want)
	for _, w := range want {
		if !covered[w] {
			t.Errorf("not covered: %s", w)
		}
	}
	if !strategies[sim.RandomWalk] || !strategies[sim.PCT] {
		t.Errorf("not covered: both schedule strategies (ran %v)", strategies)
	}

	// What each fault at each position found.
	var b strings.Builder
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := table[k]
		var outs []string
		for o, n := range f.outcomes {
			outs = append(outs, fmt.Sprintf("%s x%d", o, n))
		}
		sort.Strings(outs)
		fmt.Fprintf(&b, "  %-28s %2d cases %3d schedules: %s\n", k, f.cases, f.schedules, strings.Join(outs, "; "))
	}
	t.Logf("%d cases (%d covered keys of %d wanted), %d schedules (%d beyond the first pass of %v), in %v; what each fault found:\n%s",
		len(cases), len(covered), len(want), schedules, more, firstPass.Round(time.Second), time.Since(start).Round(time.Second), b.String())
}

// outcomeOf says what a faulted run came to, in a few words, and whether a
// run that ended with an error named the faulted rank's world rank among
// its ranks (true for a run that completed).
func outcomeOf(c explore.Case, out scenario.Outcome) (string, bool) {
	if out.Report == nil || out.Report.Error == nil {
		if out.Err != nil {
			return "error: " + executor.ErrorKind(out.Err), false
		}
		r := out.Report
		if r == nil {
			return "no report", false
		}
		return fmt.Sprintf("ok %d/%d/%d", r.RequestsCompleted, r.RequestsFailed, r.RequestsCancelled), true
	}
	re := out.Report.Error
	f, err := executor.ParseFault(c.Faults[0])
	if err != nil {
		return "bad fault: " + err.Error(), false
	}
	world := f.Rank
	if f.Role == topology.Generation {
		l, _ := topology.ParseLayout(c.Ctx)
		world += l.Ranks()
	}
	named := slices.Contains(re.Ranks, world)
	if !named && f.Kind == executor.FaultStall {
		// A stall past the collective timeout may first time out a
		// collective one step away: ranks blocked in a rank-local wait
		// on a peer of the stalled rank (a sync GEN rank on the stalled
		// rank's TP peer, itself waiting in a collective for it). The
		// error then names the peer they wait on (RunError.WaitedOn, from
		// TimeoutError.WaitsOn); that peer shares the stalled rank's
		// executor group. The ranks that timed out do not count.
		for _, r := range re.WaitedOn {
			if sameGroup(c, f, world, r) {
				return fmt.Sprintf("%s naming the missing ranks, which wait on rank %d of the stalled rank's executor group", re.Kind, r), true
			}
		}
	}
	var others []int
	for _, r := range re.Ranks {
		if r != world {
			others = append(others, r)
		}
	}
	where := "the faulted rank"
	switch {
	case !named:
		where = fmt.Sprintf("ranks %v, not the faulted rank %d", re.Ranks, world)
	case len(others) > 0:
		// A collective timeout names the rank that timed out beside the
		// one that never arrived.
		where += fmt.Sprintf(" and %d other", len(others))
	}
	return fmt.Sprintf("%s naming %s", re.Kind, where), named
}

// pinned is c's scenario with one schedule pinned, for a replay line.
func pinned(c explore.Case, o explore.Options, seed uint64) scenario.Scenario {
	s := c.Scenario
	s.Backend, s.ScheduleSeed, s.Strategy = "sim", seed, o.Strategy
	s.MsgJitter = 20 * time.Microsecond
	return s
}

// sameGroup reports whether world ranks a and b are of one executor group
// on fault f's side: one DP replica, or the whole instance under
// attention-DP.
func sameGroup(c explore.Case, f executor.Fault, a, b int) bool {
	ctxL, _ := topology.ParseLayout(c.Ctx)
	l, base := ctxL, 0
	if f.Role == topology.Generation {
		l, _ = topology.ParseLayout(c.Gen)
		base = ctxL.Ranks()
	}
	a, b = a-base, b-base
	if a < 0 || b < 0 || a >= l.Ranks() || b >= l.Ranks() {
		return false
	}
	return l.AttentionDP || l.Coord(a).DP == l.Coord(b).DP
}
