package comm

import (
	"context"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm/internal/kit"
)

// boundedComm is an optional capability of a backend communicator: it bounds
// every collective by its own timeout, in every mode (checked or not), so no
// collective waits longer than CollectiveTimeout for a peer that never
// arrives. Past the bound the collective returns an error wrapping
// ErrCollectiveTimeout, a *TimeoutError naming the group, the operation and,
// where the backend can tell, the ranks that never arrived (Missing) and what
// each rank did last (Peers). The communicator is broken afterwards.
//
// The checked layer (NewChecked) adds no deadline of its own over a boundedComm
// backend: it enriches the backend's *TimeoutError with its stamps and the
// flight records. Over a backend that is not boundedComm it bounds each
// collective itself with CheckConfig.Timeout.
type boundedComm interface {
	// CollectiveTimeout is the bound of one collective (> 0).
	CollectiveTimeout() time.Duration
}

// timeoutOf returns c's collective bound (looking through checked mode),
// or 0 when the backend does not bound its collectives.
func timeoutOf(c Comm) time.Duration {
	if b, ok := unwrap(c).(boundedComm); ok {
		return b.CollectiveTimeout()
	}
	return 0
}

// clocked is an optional capability of a backend communicator whose time
// is not the wall clock's (the simulation backend: each rank's virtual
// clock). The runtime's cores take their time from clockOf(c) when their
// configuration names no clock.
type clocked interface {
	Clock() clock.Clock
}

// clockOf returns c's clock (looking through wrappers), or the real clock.
func clockOf(c Comm) clock.Clock {
	if k, ok := unwrap(c).(clocked); ok {
		return k.Clock()
	}
	return clock.Real()
}

// InspectTimeout bounds how long the stall inspector waits for its peers'
// answers: a peer that has not answered by then is unreachable.
const InspectTimeout = inspectTimeout

// Unreachable asks every rank of c whether it is alive, through the
// backend's stall inspector (an optional capability, inspector), and returns
// the ranks that did not answer within InspectTimeout with what the
// inspector saw of every rank. A backend without an inspector, or one
// whose ranks share this process, finds none.
func Unreachable(c Comm) (missing []int, peers []PeerRecords) {
	ins, ok := unwrap(c).(inspector)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	peers = ins.InspectPeers(ctx)
	for _, p := range peers {
		if p.Err != nil && p.Rank != c.Rank() {
			missing = append(missing, p.Rank)
		}
	}
	return missing, peers
}

// WithGrace returns ctx carrying a grace of d for the collectives entered
// with it: each waits its backend's bound plus d before it times out.
// A caller that knows a peer may still be inside rank-local blocking work
// with a deadline of its own (a synchronous receive bounded by the
// transfer deadline) gives the collective that follows that work the time
// left to the deadline: a bound shorter than the wait it must sit out
// would time out ranks that are only slow, never stuck. d <= 0 leaves
// ctx as it is.
func WithGrace(ctx context.Context, d time.Duration) context.Context {
	return kit.WithGrace(ctx, d)
}
