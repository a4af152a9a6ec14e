//go:build !mpi

package mpi

import (
	"errors"
	"strings"
	"testing"
)

func TestInitWithoutMPI(t *testing.T) {
	if Available() {
		t.Fatal("Available() = true without the mpi tag")
	}
	t.Setenv("OMPI_COMM_WORLD_SIZE", "")
	t.Setenv("OMPI_COMM_WORLD_RANK", "")
	t.Setenv("PMIX_RANK", "")
	t.Setenv("PMI_RANK", "")
	t.Setenv("PMI_SIZE", "")
	w, err := Init(Config{})
	if w != nil || !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "rebuild with -tags mpi") {
		t.Fatalf("Init = %v, %v; want ErrNotBuilt", w, err)
	}
	if errors.Is(err, ErrUnderMPI) {
		t.Fatalf("not under mpirun, but %v", err)
	}
}

func TestInitWithoutMPIUnderMpirun(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_RANK", "2")
	_, err := Init(Config{})
	if !errors.Is(err, ErrNotBuilt) || !errors.Is(err, ErrUnderMPI) {
		t.Fatalf("Init under mpirun = %v; want ErrNotBuilt and ErrUnderMPI", err)
	}
}

func TestWorldMethodsPanicWithoutMPI(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Size on a no-MPI World did not panic")
		}
	}()
	var w *World
	w.Size()
}
