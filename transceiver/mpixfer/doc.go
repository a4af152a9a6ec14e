// Package mpixfer measures the KV transfer under mpirun against the bare
// MPI point-to-point of the same bytes, in the same job (build tag mpi; the
// package is otherwise empty).
//
//	go test -c -tags mpi -o xfer.test ./transceiver/mpixfer/
//	mpirun -np 2 ./xfer.test -test.run '^$' -test.bench BenchmarkTransferVsP2P -test.benchtime 15x
//
// World rank 0 is a CTX tp=1 rank, world rank 1 a GEN tp=1 rank; one
// request of 64 MiB (128 blocks of 512 KiB) goes
// from one to the other, and the reference is one Isend/Irecv of 64 MiB and
// an 8-byte reply, timed alike (from a barrier to rank 0 seeing the end).
// scripts/bench-mpi.sh runs it; cmd/rankrun bench puts the ratios in
// BENCHMARKS.md.
package mpixfer
