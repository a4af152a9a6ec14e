//go:build !mpi

package mpi

import (
	"errors"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/internal/mpienv"
)

// ErrNotBuilt is returned by Init in a binary built without the mpi tag.
var ErrNotBuilt = errors.New("mpi: built without MPI: rebuild with -tags mpi")

// Available reports whether this binary was built with the MPI backend.
func Available() bool { return false }

// World is the MPI world. In a binary built without the mpi tag no World
// can exist: Init always fails, and every method panics.
type World struct{ _ [0]func() }

// Init always fails in a binary built without the mpi tag. Under mpirun the
// error also wraps ErrUnderMPI, so the program refuses to run as N
// copies of rank 0.
func Init(cfg Config) (*World, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := mpienv.Detect().RefuseUnderMPI("this program"); err != nil {
		return nil, notBuiltUnderMPI{err}
	}
	return nil, ErrNotBuilt
}

// notBuiltUnderMPI is Init's error under mpirun: it is both ErrNotBuilt
// and ErrUnderMPI (errors.Is finds each), and reads as the refusal alone,
// which already says to rebuild with -tags mpi: one line, not two.
type notBuiltUnderMPI struct{ refusal error }

func (e notBuiltUnderMPI) Error() string   { return e.refusal.Error() }
func (e notBuiltUnderMPI) Unwrap() []error { return []error{ErrNotBuilt, e.refusal} }

func unavailable() { panic(ErrNotBuilt) }

// Comm panics: no World exists without MPI.
func (w *World) Comm() comm.Comm { unavailable(); return nil }

// Rank panics: no World exists without MPI.
func (w *World) Rank() int { unavailable(); return 0 }

// Size panics: no World exists without MPI.
func (w *World) Size() int { unavailable(); return 0 }

// LocalRank panics: no World exists without MPI.
func (w *World) LocalRank() int { unavailable(); return 0 }

// RequireSize panics: no World exists without MPI.
func (w *World) RequireSize(want int) error { unavailable(); return nil }

// Raw panics: no World exists without MPI.
func (w *World) Raw() comm.Comm { unavailable(); return nil }

// Recorder panics: no World exists without MPI.
func (w *World) Recorder() *flight.Recorder { unavailable(); return nil }

// Finalize panics: no World exists without MPI.
func (w *World) Finalize(exitCode int) int { unavailable(); return exitCode }

// Abort panics: no World exists without MPI.
func (w *World) Abort(code int, reason error) { unavailable() }
