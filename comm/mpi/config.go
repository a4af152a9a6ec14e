package mpi

import (
	"fmt"
	"time"

	"github.com/rankrun/rankrun/internal/mpienv"
)

// ErrUnderMPI is wrapped by Init's error in a binary built without the mpi
// tag that mpirun started: it must not run as N silent copies of rank 0.
var ErrUnderMPI = mpienv.ErrUnderMPI

// ThreadLevel is the MPI thread support level requested from
// MPI_Init_thread.
type ThreadLevel int

// The levels this binding accepts. Single and Funneled are not offered:
// the binding calls MPI from whichever goroutine (and so OS thread) makes a
// comm call, one call at a time, which is exactly MPI_THREAD_SERIALIZED.
const (
	// Serialized (the default): any thread may call MPI, one at a time.
	// The binding's mutex guarantees the "one at a time".
	Serialized ThreadLevel = iota
	// Multiple: MPI_THREAD_MULTIPLE. The binding still funnels every call
	// through its mutex; asking for Multiple only matters when other code
	// in the process calls MPI directly.
	Multiple
)

func (l ThreadLevel) String() string {
	switch l {
	case Serialized:
		return "serialized"
	case Multiple:
		return "multiple"
	}
	return fmt.Sprintf("ThreadLevel(%d)", int(l))
}

// Config configures Init. The zero value is valid.
type Config struct {
	// ThreadLevel requested from MPI (default Serialized; see doc.go).
	ThreadLevel ThreadLevel
	// Checked wraps World.Comm in checked mode (comm.NewChecked).
	Checked bool
	// AnySite: checked collectives pair across call sites
	// (comm.CheckConfig.AnySite).
	AnySite bool
	// Timeout bounds every collective, checked or not
	// (comm.DefaultCollectiveTimeout when 0): past it the collective returns
	// a *comm.TimeoutError naming the ranks that never arrived, and the
	// communicator is broken (comm.PropsOf(c).Timeout).
	Timeout time.Duration
	// BoundWaits bounds every point-to-point Wait by Timeout too: a wait
	// that no peer matches in time returns a *comm.WaitTimeoutError
	// (launch sets it; the executor bounds its own waits).
	BoundWaits bool
	// RecorderDepth is how many operations the flight recorder keeps
	// (flight.DefaultRecorderDepth when 0).
	RecorderDepth int
	// Size, when > 0, is the world size the program needs: Init fails,
	// naming both sizes, when mpirun started another number of ranks.
	Size int
	// FinalizeTimeout bounds the exit-code reduction in Finalize (1 minute
	// when 0); when it runs out the job is aborted instead.
	FinalizeTimeout time.Duration
	// GOMAXPROCS for this rank: 0 (the default) sets it from the cores this
	// process may use divided by the ranks on its node, at least 2 (see
	// setProcs; unless the GOMAXPROCS environment variable is set), > 0
	// sets it, < 0 leaves it.
	GOMAXPROCS int
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	switch {
	case c.ThreadLevel != Serialized && c.ThreadLevel != Multiple:
		return fmt.Errorf("mpi: Config.ThreadLevel %v: must be Serialized or Multiple", c.ThreadLevel)
	case c.Timeout < 0:
		return fmt.Errorf("mpi: Config.Timeout %v: must be >= 0", c.Timeout)
	case c.RecorderDepth < 0:
		return fmt.Errorf("mpi: Config.RecorderDepth %d: must be >= 0", c.RecorderDepth)
	case c.Size < 0:
		return fmt.Errorf("mpi: Config.Size %d: must be >= 0", c.Size)
	case c.FinalizeTimeout < 0:
		return fmt.Errorf("mpi: Config.FinalizeTimeout %v: must be >= 0", c.FinalizeTimeout)
	}
	return nil
}

// SizeError reports a world of the wrong size for the program.
type SizeError struct {
	Want, Got int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("mpi: world has %d ranks but this program needs exactly %d (start it with mpirun -np %d)", e.Got, e.Want, e.Want)
}
