package explore

import (
	"context"
	"strings"

	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
)

// shrink looks for a smaller case that still fails: fewer requests (halved),
// then smaller layouts (one dimension halved at a time, keeping the
// family's attention-DP where it stays valid), each tried under up to
// ShrinkSeeds schedules (the failing seed first), greedily, until nothing
// smaller fails. It returns the smallest failure and how many smaller cases
// failed on the way.
func shrink(ctx context.Context, f *Failure, o Options) (*Failure, int) {
	best, steps := f, 0
	for ctx.Err() == nil {
		next := smallerFailing(ctx, best, o)
		if next == nil {
			return best, steps
		}
		best = next
		steps++
	}
	return best, steps
}

// smallerFailing returns the first smaller candidate of f that fails under
// some schedule, or nil.
func smallerFailing(ctx context.Context, f *Failure, o Options) *Failure {
	for _, c := range candidates(f.Scenario) {
		if ctx.Err() != nil {
			return nil
		}
		for i := range o.ShrinkSeeds {
			seed := f.Scenario.ScheduleSeed + uint64(i)
			g := Try(ctx, c, f.Replay, seed, o)
			if ctx.Err() != nil {
				return nil // a run the interrupt cut short is no verdict
			}
			if g != nil && sameKind(f, g) {
				return g
			}
		}
	}
	return nil
}

// sameKind reports whether g fails the way f does (a smaller case that
// fails for another reason is another bug, not a smaller reproducer).
func sameKind(f, g *Failure) bool {
	return kind(f) == kind(g)
}

func kind(f *Failure) string {
	if f.Outcome.Err != nil {
		if n := scenario.ErrorName(f.Outcome.Err); n != "" {
			return n
		}
		return "error"
	}
	if len(f.Why) > 0 {
		w := f.Why[0]
		if i := strings.IndexAny(w, ":("); i > 0 {
			return w[:i]
		}
		return w
	}
	return ""
}

// candidates lists the cases one step smaller than s that are still valid.
func candidates(s scenario.Scenario) []scenario.Scenario {
	var out []scenario.Scenario
	add := func(c scenario.Scenario) {
		if _, err := c.Config(false); err == nil {
			out = append(out, c)
		}
	}
	if s.Requests > 1 {
		c := s
		c.Requests = max(1, s.Requests/2)
		if faultsFit(c) {
			add(c)
		}
	}
	for _, side := range []*string{&s.Ctx, &s.Gen} {
		l, err := topology.ParseLayout(*side)
		if err != nil {
			continue
		}
		for _, m := range smallerLayouts(l) {
			c := s
			if side == &s.Ctx {
				c.Ctx = m.String()
			} else {
				c.Gen = m.String()
			}
			if faultsFit(c) {
				add(c)
			}
		}
	}
	return out
}

// smallerLayouts halves one dimension of l at a time.
func smallerLayouts(l topology.Layout) []topology.Layout {
	var out []topology.Layout
	for _, dim := range []*int{&l.TP, &l.PP, &l.CP, &l.DP} {
		if *dim < 2 {
			continue
		}
		m := l
		switch dim {
		case &l.TP:
			m.TP /= 2
		case &l.PP:
			m.PP /= 2
		case &l.CP:
			m.CP /= 2
		case &l.DP:
			m.DP /= 2
			if m.DP < 2 {
				m.AttentionDP = false
			}
		}
		out = append(out, m)
	}
	return out
}

// faultsFit reports whether every fault of c names a rank and a request
// that exist in c.
func faultsFit(c scenario.Scenario) bool {
	cfg, err := c.Config(false)
	if err != nil {
		return false
	}
	for _, f := range cfg.Faults {
		if f.Request > 0 && int(f.Request) > c.Requests {
			return false
		}
		n := cfg.Ctx.Ranks()
		if f.Role == topology.Generation {
			n = cfg.Gen.Ranks()
		}
		if f.Rank >= n {
			return false
		}
	}
	return true
}
