package scenario

import (
	"fmt"
	"strings"
	"time"

	"github.com/rankrun/rankrun/topology"
)

// Families names the generated scenario sets (Generate).
var Families = []string{"adp"}

// Generate returns a generated family of scenarios:
//
//	adp  every pair of CTX and GEN layouts where at least one side is
//	     attention-DP (each side: every adp layout of up to 4 ranks from
//	     topology.Enumerate, or tp=1), async and sync, plus the layouts the
//	     attention-DP + TP deadlock was first reported with (8 GEN ranks).
//	     Each must complete every request, every byte verified, nothing
//	     leaked: a rank-local fact choosing the next collective shows up as
//	     a named desync or timeout, never a hang.
//
// Names are file-safe ("adp_ctx-tp=1_gen-tp=2,dp=2,adp_async").
func Generate(family string) ([]Scenario, error) {
	if family != "adp" {
		return nil, fmt.Errorf("scenario: unknown generated family %q (valid: %s)", family, strings.Join(Families, ", "))
	}
	sides := []topology.Layout{topology.MustParseLayout("tp=1")}
	for _, l := range topology.Enumerate(DefaultModel, 4) {
		if l.AttentionDP {
			sides = append(sides, l)
		}
	}
	type pair struct{ ctx, gen string }
	var pairs []pair
	for _, c := range sides {
		for _, g := range sides {
			if (c.AttentionDP || g.AttentionDP) && topology.Compatible(c, g, DefaultModel) {
				pairs = append(pairs, pair{c.String(), g.String()})
			}
		}
	}
	pairs = append(pairs, pair{"tp=1", "tp=4,dp=2,adp"}, pair{"tp=1", "tp=2,dp=4,adp"}, pair{"tp=1", "tp=2,pp=2,dp=2,adp"},
		pair{"cp=2", "tp=2,dp=2,adp"})
	var out []Scenario
	for _, p := range pairs {
		for _, tr := range []string{"async", "sync"} {
			s := New(fmt.Sprintf("adp_ctx-%s_gen-%s_%s", p.ctx, p.gen, tr))
			s.Ctx, s.Gen, s.Transfer = p.ctx, p.gen, tr
			s.Requests, s.Input, s.Output, s.Arrival = 12, 40, 3, "closed=4"
			s.InputJitter = 0.5
			s.StallTimeout = 5 * time.Second
			s.Timeout = 40 * time.Second
			for _, line := range []string{"ok", fmt.Sprintf("completed == %d", s.Requests), "bytes-moved > 0"} {
				if err := s.Expect.Add(line); err != nil {
					return nil, err
				}
			}
			out = append(out, s)
		}
	}
	return out, nil
}
