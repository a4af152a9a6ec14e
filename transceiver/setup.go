package transceiver

import (
	"context"
	"fmt"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/topology"
)

// Groups are the communicators one rank needs, built by Setup.
type Groups struct {
	Role     Role
	Rank     int       // rank within the instance
	Instance comm.Comm // every rank of this rank's instance
	Executor comm.Comm // the ranks that run one executor loop together
	Scope    []comm.Comm
}

// Close closes every communicator of g.
func (g *Groups) Close() {
	for _, c := range g.Scope {
		c.Close()
	}
	if g.Executor != nil {
		g.Executor.Close()
	}
	if g.Instance != nil {
		g.Instance.Close()
	}
}

// RoleOf maps a world rank to its role and instance rank: CTX ranks come
// first in the world, then GEN ranks.
func RoleOf(ctxL, genL topology.Layout, worldRank int) (Role, int) {
	if worldRank < ctxL.Ranks() {
		return Context, worldRank
	}
	return Generation, worldRank - ctxL.Ranks()
}

// Setup splits world into the communicators of DESIGN.md §4 and §6. It is a
// collective over world: every rank calls it, in the same order relative to
// its other collectives. Hops of one rank are left out of the scope (there
// is nothing to agree with).
//
// Consensus scopes: CTX agrees over its TP group, then its PP group (only
// the PP group under attention-DP). GEN agrees over its executor group (the
// whole instance when dp=1; a replica otherwise, since other replicas never
// hold its requests), or over the PP x CP ranks of its DP index under
// attention-DP.
func Setup(ctx context.Context, world comm.Comm, ctxL, genL topology.Layout) (*Groups, error) {
	if want := ctxL.Ranks() + genL.Ranks(); world.Size() != want {
		return nil, fmt.Errorf("%w: world has %d ranks, ctx %s needs %d and gen %s needs %d (%d in all)",
			ErrConfig, world.Size(), ctxL, ctxL.Ranks(), genL, genL.Ranks(), want)
	}
	role, rank := RoleOf(ctxL, genL, world.Rank())
	g := &Groups{Role: role, Rank: rank}
	inst, err := world.Split(ctx, int(role), rank)
	if err != nil {
		return nil, fmt.Errorf("transceiver: split instance: %w", err)
	}
	g.Instance = inst
	layout := ctxL
	if role == Generation {
		layout = genL
	}
	split := func(members []int) (comm.Comm, error) {
		c, err := inst.Split(ctx, members[0], rank)
		if err != nil {
			return nil, fmt.Errorf("transceiver: split %s group %v: %w", role, members, err)
		}
		if c.Size() != len(members) {
			return nil, fmt.Errorf("transceiver: split %s group %v gave %d ranks", role, members, c.Size())
		}
		return c, nil
	}
	if g.Executor, err = split(layout.ExecutorGroup(rank)); err != nil {
		g.Close()
		return nil, err
	}
	var hops [][]int
	if role == Context {
		hops = layout.CtxScopes(rank)
	} else if layout.AttentionDP {
		hops = layout.GenScopes(rank)
	} else {
		hops = [][]int{layout.ExecutorGroup(rank)}
	}
	for _, members := range hops {
		// Every rank of the instance splits once per hop, so the splits
		// pair up even where a hop is a single rank.
		c, err := split(members)
		if err != nil {
			g.Close()
			return nil, err
		}
		if c.Size() == 1 {
			c.Close()
			continue
		}
		g.Scope = append(g.Scope, c)
	}
	return g, nil
}
