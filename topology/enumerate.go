package topology

import (
	"slices"
	"strings"
)

// Enumerate returns every layout of at most maxRanks ranks that can hold m:
// each of tp, pp, cp, dp a power of two, and each layout with dp > 1 both
// with and without attention-DP. The order is deterministic (by ranks, then
// canonical spec), so a seeded pick from it is reproducible.
func Enumerate(m Model, maxRanks int) []Layout {
	var out []Layout
	for tp := 1; tp <= maxRanks; tp *= 2 {
		for pp := 1; tp*pp <= maxRanks; pp *= 2 {
			for cp := 1; tp*pp*cp <= maxRanks; cp *= 2 {
				for dp := 1; tp*pp*cp*dp <= maxRanks; dp *= 2 {
					for _, adp := range []bool{false, true} {
						l := Layout{TP: tp, PP: pp, CP: cp, DP: dp, AttentionDP: adp}
						if (adp && dp < 2) || l.ValidateFor(m) != nil {
							continue
						}
						out = append(out, l)
					}
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Layout) int {
		if a.Ranks() != b.Ranks() {
			return a.Ranks() - b.Ranks()
		}
		return strings.Compare(a.String(), b.String())
	})
	return out
}

// WithExperts returns ls with, after each layout, its expert-parallel
// variants for a model of experts routed experts: every power of two
// ep > 1 that divides the layout's FFN ranks and the experts, smallest
// first. Enumerate leaves ep out (it knows no experts); a search over an
// MoE model's layouts adds them with this.
func WithExperts(ls []Layout, experts int) []Layout {
	var out []Layout
	for _, l := range ls {
		out = append(out, l)
		for ep := 2; ep <= l.FFNRanks(); ep *= 2 {
			if l.FFNRanks()%ep != 0 || experts%ep != 0 {
				continue
			}
			e := l
			e.EP = ep
			out = append(out, e)
		}
	}
	return out
}

// Family names the kind of a layout: the parallel dimensions above 1, in
// the order tp, pp, cp, dp, then adp and ep ("tp+pp", "dp+adp",
// "tp+ep", "single" for one rank). Layouts of one family differ only in
// their sizes.
func (l Layout) Family() string {
	var parts []string
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", l.TP}, {"pp", l.PP}, {"cp", l.CP}, {"dp", l.DP}} {
		if f.v > 1 {
			parts = append(parts, f.name)
		}
	}
	if l.AttentionDP {
		parts = append(parts, "adp")
	}
	if l.EP > 1 {
		parts = append(parts, "ep")
	}
	if len(parts) == 0 {
		return "single"
	}
	return strings.Join(parts, "+")
}

// Compatible reports whether a CTX and a GEN layout can serve one model
// together (both hold it and one CP size divides the other): exactly the
// pairs Map accepts.
func Compatible(ctx, gen Layout, m Model) bool {
	return checkMap(ctx, gen, m) == nil // Map's verdict, without building the mapping
}
