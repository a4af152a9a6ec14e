package mpienv

import (
	"errors"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	l := detect(env(nil))
	if l.UnderMPI || l.RefuseUnderMPI("rankrun") != nil {
		t.Fatalf("no launcher variables: %+v", l)
	}
	l = detect(env(map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}))
	if !l.UnderMPI || l.WorldRank != 2 || l.WorldSize != 4 || l.LocalRank != 0 {
		t.Fatalf("Open MPI variables: %+v", l)
	}
	err := l.RefuseUnderMPI("rankrun")
	if !errors.Is(err, ErrUnderMPI) || !strings.Contains(err.Error(), "rank 2 of 4") || !strings.Contains(err.Error(), "-tags mpi") {
		t.Fatalf("refusal: %v", err)
	}
	// PMIx alone (another launcher) also counts.
	if l := detect(env(map[string]string{"PMIX_RANK": "1"})); !l.UnderMPI || l.WorldRank != 1 {
		t.Fatalf("PMIX_RANK: %+v", l)
	}
}
