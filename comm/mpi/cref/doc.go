// Package cref is the C reference of the MPI binding's benchmarks, linked
// into the comm/mpi test binary only (build tag mpi): the same loops as the
// Go benchmarks, with plain blocking MPI calls on MPI_COMM_WORLD, callable
// from Go so that the benchmark can alternate C and Go chunks inside one
// mpirun job (comm/mpi BenchmarkVsC). comm/mpi/bench/ref.c is the same
// reference as a separate program.
package cref
