// Package commtest is the conformance suite every comm backend passes
// unchanged: the in-process world (comm/local), the simulation (comm/sim,
// in virtual time) and MPI (comm/mpi, under mpirun with 2 and 4 ranks).
//
// A backend supplies a Launcher. Each case is a function run on every rank;
// it checks its own rank's expectations and returns an error describing any
// mismatch, so the same case works whether the ranks are goroutines of this
// process or processes of an mpirun job.
package commtest

import (
	"context"
	"time"

	"github.com/rankrun/rankrun/comm"
)

// Options configures one launch.
type Options struct {
	Checked bool // wrap each rank's communicator in checked mode
	// Timeout is the collective timeout (0: the default): checked mode's,
	// and the backend's own bound where the launcher can set it
	// (backends with a collective bound (comm.PropsOf(c).Timeout) bound unchecked collectives too).
	Timeout time.Duration
}

// RankFunc is run on every rank of a launched world.
type RankFunc func(ctx context.Context, c comm.Comm) error

// Launcher starts worlds for the suite.
type Launcher interface {
	// Sizes lists the world sizes this launcher can start.
	Sizes() []int
	// Launch runs fn on every rank of a fresh world of n ranks and returns
	// the errors of the ranks hosted by this process (joined), nil when all
	// of them returned nil. A fresh world means collectives of earlier
	// launches (even broken ones) cannot pair with this one's.
	Launch(ctx context.Context, n int, opts Options, fn RankFunc) error
}

// OneGoroutine is an optional capability of a Launcher whose backend runs
// each rank on exactly one goroutine (the simulation backend schedules
// ranks, not goroutines): cases that drive one rank from several
// goroutines are skipped, saying why.
type OneGoroutine interface {
	OneGoroutinePerRank() bool
}

// FloatOrder is an optional capability of a Launcher: a backend whose
// small floating-point reductions do not promise rank order (MPI's own
// non-blocking collectives) returns false, and the case that asserts rank
// order is skipped, saying why. Without it, rank order is expected (the
// in-process and simulated backends, and MPI's direct path for small
// groups and vectors, promise it; see comm.Allreduce).
type FloatOrder interface {
	RankOrderFloats() bool
}
