// C reference for scripts/bench-mpi.sh: the same four loops as the Go
// benchmarks in comm/mpi/bench_test.go, with plain blocking MPI calls.
//
//   ref <which> <iterations> [multiple]
//
// which: allreduce | allgather | p2p1m | p2p64m (blocking MPI), or
// iallreduce | iallgather (non-blocking + MPI_Test polling: what a binding
// that polls MPI's non-blocking collectives can reach at best).
// multiple: initialise with MPI_THREAD_MULTIPLE instead of
// MPI_THREAD_SINGLE (to measure what that level costs uncontended).
//
// Rank 0 prints one line: "<which> <iterations> <ns/op> <MB/s or 0>".
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void allreduce(long n) {
	int64_t in = rank, out = 0;
	for (long i = 0; i < n; i++) MPI_Allreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
}

// The non-blocking forms the Go binding uses (so it can honour a context),
// completed by polling MPI_Test: the floor for the binding's design.
static void iallreduce(long n) {
	int64_t in = rank, out = 0;
	for (long i = 0; i < n; i++) {
		MPI_Request q;
		int done = 0;
		MPI_Iallreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &q);
		while (!done) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
	}
}

static void iallgather(long n) {
	int64_t vals[64] = {0};
	int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
	int64_t *flat = malloc((size_t)size * 64 * sizeof(int64_t));
	for (long i = 0; i < n; i++) {
		int k = (int)((rank * 7 + i * 3) % 65), done = 0;
		MPI_Request q;
		MPI_Iallgather(&k, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD, &q);
		while (!done) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
		int total = 0;
		for (int r = 0; r < size; r++) { displs[r] = total; total += counts[r]; }
		if (total > 0) {
			done = 0;
			MPI_Iallgatherv(vals, k, MPI_INT64_T, flat, counts, displs, MPI_INT64_T, MPI_COMM_WORLD, &q);
			while (!done) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
		}
	}
	free(counts); free(displs); free(flat);
}

static void allgather(long n) {
	int64_t vals[64] = {0};
	int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
	int64_t *flat = malloc((size_t)size * 64 * sizeof(int64_t));
	for (long i = 0; i < n; i++) {
		int k = (int)((rank * 7 + i * 3) % 65);
		MPI_Allgather(&k, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
		int total = 0;
		for (int r = 0; r < size; r++) { displs[r] = total; total += counts[r]; }
		if (total > 0)
			MPI_Allgatherv(vals, k, MPI_INT64_T, flat, counts, displs, MPI_INT64_T, MPI_COMM_WORLD);
	}
	free(counts); free(displs); free(flat);
}

static void p2p(long n, size_t bytes) {
	char *buf = calloc(bytes, 1);
	int peer = rank ^ 1;
	if (peer < size) {
		for (long i = 0; i < n; i++) {
			MPI_Request q;
			if (rank % 2 == 0) MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q);
			else MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q);
			MPI_Wait(&q, MPI_STATUS_IGNORE);
		}
	}
	free(buf);
}

static void run(const char *which, long n) {
	if (!strcmp(which, "allreduce")) allreduce(n);
	else if (!strcmp(which, "allgather")) allgather(n);
	else if (!strcmp(which, "iallreduce")) iallreduce(n);
	else if (!strcmp(which, "iallgather")) iallgather(n);
	else if (!strcmp(which, "p2p1m")) p2p(n, 1 << 20);
	else if (!strcmp(which, "p2p64m")) p2p(n, 64 << 20);
	else { if (rank == 0) fprintf(stderr, "ref: unknown benchmark %s\n", which); MPI_Abort(MPI_COMM_WORLD, 2); }
}

int main(int argc, char **argv) {
	int provided = 0, level = MPI_THREAD_SINGLE;
	if (argc == 4 && !strcmp(argv[3], "multiple")) level = MPI_THREAD_MULTIPLE;
	MPI_Init_thread(&argc, &argv, level, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 3 && !(argc == 4 && level == MPI_THREAD_MULTIPLE)) {
		if (rank == 0) fprintf(stderr, "usage: ref allreduce|allgather|iallreduce|iallgather|p2p1m|p2p64m iterations [multiple]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (provided < level) {
		if (rank == 0) fprintf(stderr, "ref: MPI granted thread level %d, asked for %d\n", provided, level);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	long n = atol(argv[2]);
	// Warm up like Go's benchmark runner (one iteration first), then time.
	MPI_Barrier(MPI_COMM_WORLD);
	run(argv[1], 1);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	run(argv[1], n);
	double t = MPI_Wtime() - t0;
	if (rank == 0) {
		double nsop = t * 1e9 / (double)n;
		double mbs = 0;
		if (!strcmp(argv[1], "p2p1m")) mbs = (double)(1 << 20) * n / t / 1e6;
		if (!strcmp(argv[1], "p2p64m")) mbs = (double)(64 << 20) * n / t / 1e6;
		printf("%s %ld %.1f %.1f\n", argv[1], n, nsop, mbs);
	}
	MPI_Finalize();
	return 0;
}
