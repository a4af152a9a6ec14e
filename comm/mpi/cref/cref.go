//go:build mpi

package cref

/*
#cgo pkg-config: ompi
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

static void allreduce(long n) {
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int64_t in = rank, out = 0;
	for (long i = 0; i < n; i++) MPI_Allreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
}

// allgather is the consensus pattern: counts, then the values (0..64 per
// rank, varying every call), as the Go benchmark; i0 continues its sequence.
static void allgather(long n, long i0) {
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int64_t vals[64] = {0};
	int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
	int64_t *flat = malloc((size_t)size * 64 * sizeof(int64_t));
	for (long i = i0; i < i0 + n; i++) {
		int k = (int)((rank * 7 + i * 3) % 65);
		MPI_Allgather(&k, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
		int total = 0;
		for (int r = 0; r < size; r++) { displs[r] = total; total += counts[r]; }
		if (total > 0) MPI_Allgatherv(vals, k, MPI_INT64_T, flat, counts, displs, MPI_INT64_T, MPI_COMM_WORLD);
	}
	free(counts); free(displs); free(flat);
}

static void p2p(long n, char *buf, long bytes) {
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int peer = rank ^ 1;
	if (peer >= size) return;
	for (long i = 0; i < n; i++) {
		MPI_Request q;
		if (rank % 2 == 0) MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q);
		else MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q);
		MPI_Wait(&q, MPI_STATUS_IGNORE);
	}
}

static char *alloc(long bytes) { return calloc(bytes > 0 ? bytes : 1, 1); }

// fill_f32 writes float32 values into every page of b (a calloc'd buffer
// left untouched reads the kernel's shared zero page: cache-hot, not what a
// program's buffers are).
static void fill_f32(char *b, long bytes) {
	float *f = (float *)b;
	for (long i = 0; i < bytes / 4; i++) f[i] = (float)(i % 1000);
}

// allreduce_f32 is the data-parallel gradient step: n blocking
// MPI_Allreduce (sum) of count float32, out of place.
static void allreduce_f32(long n, char *in, char *out, long count) {
	for (long i = 0; i < n; i++) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

// alltoall_f32 is the MoE token dispatch: n blocking MPI_Alltoall of
// per float32 to every rank.
static void alltoall_f32(long n, char *in, char *out, long per) {
	for (long i = 0; i < n; i++) MPI_Alltoall(in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
}
*/
import "C"

import "unsafe"

// Allreduce runs n blocking MPI_Allreduce of one int64 (sum).
func Allreduce(n int) { C.allreduce(C.long(n)) }

// AllgatherPair runs n rounds of MPI_Allgather (counts) + MPI_Allgatherv of
// 0..64 int64 per rank; i0 is the round the sequence of counts starts at.
func AllgatherPair(n, i0 int) { C.allgather(C.long(n), C.long(i0)) }

// Buffer is C memory for P2P.
type Buffer struct {
	p *C.char
	n int
}

// NewBuffer allocates n zero bytes of C memory.
func NewBuffer(n int) Buffer { return Buffer{C.alloc(C.long(n)), n} }

// Free releases the buffer.
func (b Buffer) Free() { C.free(unsafe.Pointer(b.p)) }

// P2P runs n transfers of the buffer from each even rank to the next odd
// one (MPI_Isend/MPI_Irecv + MPI_Wait); the odd rank out does nothing.
func P2P(n int, b Buffer) { C.p2p(C.long(n), b.p, C.long(b.n)) }

// FillF32 writes float32 values into the whole buffer, as the Go side's
// benchmark loops fill theirs.
func (b Buffer) FillF32() { C.fill_f32(b.p, C.long(b.n)) }

// AllreduceF32 runs n blocking MPI_Allreduce (sum) of the float32 in in
// into out (both count*4 bytes).
func AllreduceF32(n int, in, out Buffer) { C.allreduce_f32(C.long(n), in.p, out.p, C.long(in.n/4)) }

// AlltoallF32 runs n blocking MPI_Alltoall of in into out (both of the
// same size, a multiple of 4*size bytes): in.n/4/size float32 to each rank.
func AlltoallF32(n, size int, in, out Buffer) {
	C.alltoall_f32(C.long(n), in.p, out.p, C.long(in.n/4/size))
}
