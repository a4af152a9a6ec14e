package mpi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestKillWindow: mpirun passes --mca odls_base_sigkill_timeout N to its
// ranks as OMPI_MCA_odls_base_sigkill_timeout=N (checked under Open MPI
// 4.1.4); anything that is not a positive whole number of seconds keeps
// Open MPI's default of one second.
func TestKillWindow(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"":                  time.Second,
		"1":                 time.Second,
		"3":                 3 * time.Second,
		"60":                time.Minute,
		"0":                 time.Second,
		"-2":                time.Second,
		"1.5":               time.Second,
		"three":             time.Second,
		"99999999999999999": 365 * 24 * time.Hour,
	} {
		assert.Equal(t, want, killWindow(v), "odls_base_sigkill_timeout=%q", v)
	}
	t.Setenv(killWindowVar, "7")
	assert.Equal(t, 7*time.Second, KillWindow())
}
