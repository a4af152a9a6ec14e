package transceiver

import (
	"context"
	"fmt"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/topology"
)

// Scopes splits inst, the communicator of one instance (every rank of the
// CTX or of the GEN side, in instance-rank order), into the consensus hops
// of DESIGN.md §4 for the calling rank: CTX agrees over its TP group, then
// its PP group (only the PP group under attention-DP); GEN agrees over its
// executor group (the whole instance when dp=1, its replica otherwise), or
// over the PP x CP ranks of its DP index that share its TP index under
// attention-DP. Hops of one rank are left out (nothing to agree with).
//
// It is a collective over inst: every rank of the instance calls it, in the
// same order relative to its other collectives. The caller owns the
// returned communicators (CloseAll).
func Scopes(ctx context.Context, inst comm.Comm, role topology.Role, layout topology.Layout) ([]comm.Comm, error) {
	rank := inst.Rank()
	if inst.Size() != layout.Ranks() {
		return nil, fmt.Errorf("%w: the %s instance communicator has %d ranks, layout %s needs %d", ErrConfig, role, inst.Size(), layout, layout.Ranks())
	}
	var hops [][]int
	switch {
	case role == topology.Context:
		hops = layout.CtxScopes(rank)
	case layout.AttentionDP:
		hops = layout.GenScopes(rank)
	default:
		hops = [][]int{layout.ExecutorGroup(rank)}
	}
	var scope []comm.Comm
	for _, members := range hops {
		// Every rank of the instance splits once per hop, so the splits
		// pair up even where a hop is a single rank.
		c, err := inst.Split(ctx, members[0], rank)
		if err != nil {
			CloseAll(scope)
			return nil, fmt.Errorf("transceiver: split %s consensus group %v: %w", role, members, err)
		}
		if c.Size() != len(members) {
			CloseAll(append(scope, c))
			return nil, fmt.Errorf("transceiver: split %s consensus group %v gave %d ranks", role, members, c.Size())
		}
		if c.Size() == 1 {
			c.Close()
			continue
		}
		scope = append(scope, c)
	}
	return scope, nil
}

// CloseAll closes every communicator of a scope.
func CloseAll(scope []comm.Comm) {
	for _, c := range scope {
		c.Close()
	}
}
