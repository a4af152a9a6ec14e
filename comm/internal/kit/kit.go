// Package kit holds what package comm and its backends share and no user
// calls: how an error names a rank of a sub-communicator, and the grace
// comm.WithGrace gives a collective. It imports no rankrun package, so
// comm and every backend can import it.
package kit

import (
	"context"
	"fmt"
	"time"
)

// Who names group rank r as an error should: "rank r", followed by its
// world rank when worlds (the group's world ranks, comm.PropsOf(c).WorldRanks) maps
// it elsewhere, so a reader of an error on a sub-communicator knows which
// process to look at: "rank 1 (world rank 3)".
func Who(worlds []int, r int) string { return fmt.Sprintf("rank %d%s", r, WorldSuffix(worlds, r)) }

// WorldOf maps group ranks to world ranks through worlds, or returns nil
// when the mapping is unknown, does not cover a rank, or is the identity
// for all of them (nothing worth printing).
func WorldOf(worlds, ranks []int) []int {
	if worlds == nil || len(ranks) == 0 {
		return nil
	}
	out := make([]int, 0, len(ranks))
	same := true
	for _, r := range ranks {
		if r < 0 || r >= len(worlds) {
			return nil
		}
		out = append(out, worlds[r])
		same = same && worlds[r] == r
	}
	if same {
		return nil
	}
	return out
}

// WorldSuffix is " (world rank W)" for group rank r whose world rank
// differs from it, "" otherwise.
func WorldSuffix(worlds []int, r int) string {
	if w := WorldOf(worlds, []int{r}); w != nil {
		return fmt.Sprintf(" (world rank %d)", w[0])
	}
	return ""
}

// graceKey carries a collective's grace (WithGrace) in its context.
type graceKey struct{}

// WithGrace returns ctx carrying a grace of d (ctx itself when d <= 0).
func WithGrace(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, graceKey{}, d)
}

// GraceOf returns the grace WithGrace put in ctx (0 when none). Backends
// that bound their collectives add it to their bound.
func GraceOf(ctx context.Context) time.Duration {
	d, _ := ctx.Value(graceKey{}).(time.Duration)
	return d
}
