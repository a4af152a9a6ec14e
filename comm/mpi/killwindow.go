package mpi

import (
	"os"
	"strconv"
	"time"
)

// DefaultKillWindow is Open MPI's default odls_base_sigkill_timeout: mpirun
// kills a rank one second after it forwarded a signal to it.
const DefaultKillWindow = time.Second

// killWindowVar is how mpirun passes odls_base_sigkill_timeout to its ranks
// when the job sets it (mpirun --mca odls_base_sigkill_timeout 3, or the
// variable itself in mpirun's environment).
const killWindowVar = "OMPI_MCA_odls_base_sigkill_timeout"

// KillWindow is how long a rank has, after mpirun forwarded SIGINT or
// SIGTERM to it, before mpirun kills it: what a rank's last words (a
// partial report) must fit in. It is the job's odls_base_sigkill_timeout
// when mpirun passed one, else DefaultKillWindow. A value set only in an
// MCA parameter file does not reach the ranks and is not seen.
func KillWindow() time.Duration { return killWindow(os.Getenv(killWindowVar)) }

// killWindow reads odls_base_sigkill_timeout's value (whole seconds, as
// Open MPI takes it); an empty, unparsable or non-positive value gives
// DefaultKillWindow, and one past a year is read as a year (the Duration
// would overflow).
func killWindow(v string) time.Duration {
	s, err := strconv.Atoi(v)
	if err != nil || s <= 0 {
		return DefaultKillWindow
	}
	return time.Duration(min(s, maxKillWindow)) * time.Second
}

// maxKillWindow is a year in seconds.
const maxKillWindow = 365 * 24 * 3600
