// C helpers of the MPI binding (included by the cgo files of this package).
#ifndef RANKRUN_CMPI_H
#define RANKRUN_CMPI_H
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

// Every handle, constant and buffer that MPI touches lives in C memory (the
// structs below are C.malloc'd), so a call from Go passes only C pointers:
// nothing escapes, nothing is allocated on the Go heap per call, and an
// abandoned non-blocking operation can keep its buffers for as long as MPI
// needs them.

// Tags on a communicator's control duplicate: stall inspection requests and
// replies, and the direct collectives' messages (inline, overflow).
enum { RR_TAG_REQ = 1, RR_TAG_REP = 2, RR_TAG_DX = 3, RR_TAG_DXO = 4, RR_TAG_DXA = 5 };

// rr_now is CLOCK_MONOTONIC in ns (vDSO: no system call).
static int64_t rr_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// A spin loop reads the clock only every RR_CLOCK_EVERY iterations, and
// not at all before: an operation that completes in its first iterations
// costs no clock read.
enum { RR_CLOCK_EVERY = 16 };

// Giving the core away while spinning. Open MPI's own yield (its
// mpi_yield_when_idle, on when ranks outnumber cores) calls sched_yield in
// every progress call; on a machine where an unrelated busy process shares
// the cores, each such yield hands it a whole time slice, and a collective
// of five ranks on two cores took 350 ms instead of 0.2 ms (measured with
// two `yes` loops beside the job). The binding therefore turns that off
// (mpi.Init) and yields itself, between the polls of a spin, only while
// *yield is set (the caller sets it when its ranks outnumber its cores);
// a yield that took longer than RR_SLOW_YIELD_NS gave the core to a process
// that kept it for a slice: the spin clears *yield and returns, and the
// caller sleeps between its polls instead (a sleeper is woken in time, a
// yielder waits for the slice).
enum { RR_SLOW_YIELD_NS = 1000000 };

// rr_yield gives the core away once when *yield is set; it returns 0 (and
// clears *yield) when that yield was slow.
static int rr_yield(int *yield) {
	if (!*yield) return 1;
	int64_t t = rr_now();
	sched_yield();
	if (rr_now() - t > RR_SLOW_YIELD_NS) {
		*yield = 0;
		return 0;
	}
	return 1;
}

// rr_coll is the state of one communicator's collectives: the request in
// flight and its scratch buffers (grown, never shrunk).
typedef struct {
	MPI_Request req;
	MPI_Status st;
	int flag;
	int mycount;
	int64_t len;   // Bcast length
	int64_t *sbuf; long scap;
	int64_t *rbuf; long rcap;
	int *counts; int *displs; int ccap;
	char *bbuf; long bcap;
	int *tcounts; int tccap; // typed collectives: 4 x size counts and displacements, alive until completion
} rr_coll;

// rr_p2p is one point-to-point request.
typedef struct {
	MPI_Request req;
	MPI_Status st;
	int flag;
	int cancelled;
	int count;
	int64_t word; // small payload owned by the request (inspector nonce)
	char *owned;  // C buffer freed with the request (inspector replies)
} rr_p2p;

// rr_insp is a communicator's inspection channel: a duplicate of the
// communicator with a receive for inspection requests always posted.
typedef struct {
	MPI_Comm comm;
	MPI_Request req;
	MPI_Status st;
	int flag;
	int64_t nonce;
} rr_insp;

static MPI_Comm rr_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm rr_comm_null(void) { return MPI_COMM_NULL; }

static MPI_Op rr_op(int op) {
	switch (op) {
	case 1: return MPI_SUM;
	case 2: return MPI_MIN;
	case 3: return MPI_MAX;
	case 4: return MPI_BOR;
	case 5: return MPI_BAND;
	}
	return MPI_OP_NULL;
}

static int rr_init(int level, int *provided) {
	int flag = 0;
	MPI_Initialized(&flag);
	if (flag) return -1;
	return MPI_Init_thread(NULL, NULL, level, provided);
}

// rr_node_cpus is the number of cores online on this node (not this
// process's affinity: mpirun may bind each rank to one of them).
static int rr_node_cpus(void) { long n = sysconf(_SC_NPROCESSORS_ONLN); return n > 0 ? (int)n : 1; }

static int rr_finalized(void) { int f = 0; MPI_Finalized(&f); return f; }

static void rr_errstr(int code, char *buf, int *len, int *cls) {
	*len = 0;
	if (MPI_Error_string(code, buf, len) != MPI_SUCCESS) *len = 0;
	*cls = -1;
	MPI_Error_class(code, cls);
}

static int rr_setup(MPI_Comm c, int *rank, int *size) {
	int rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
	if (rc) return rc;
	rc = MPI_Comm_rank(c, rank);
	if (rc) return rc;
	return MPI_Comm_size(c, size);
}

// rr_world_ranks writes the MPI_COMM_WORLD rank of each of c's n ranks.
static int rr_world_ranks(MPI_Comm c, int n, int *out) {
	MPI_Group g, w;
	int rc = MPI_Comm_group(c, &g);
	if (rc) return rc;
	rc = MPI_Comm_group(MPI_COMM_WORLD, &w);
	if (rc) { MPI_Group_free(&g); return rc; }
	int *in = (int *)malloc((n > 0 ? n : 1) * sizeof(int));
	if (!in) { MPI_Group_free(&g); MPI_Group_free(&w); return MPI_ERR_NO_MEM; }
	for (int i = 0; i < n; i++) in[i] = i;
	rc = MPI_Group_translate_ranks(g, n, in, w, out);
	free(in);
	MPI_Group_free(&g);
	MPI_Group_free(&w);
	return rc;
}

// rr_local_rank gives this process's rank among the ranks on its node, and
// how many there are.
static int rr_local_rank(int *lrank, int *lsize) {
	MPI_Comm node;
	int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	if (rc) return rc;
	rc = MPI_Comm_rank(node, lrank);
	if (!rc) rc = MPI_Comm_size(node, lsize);
	MPI_Comm_free(&node);
	return rc;
}

static rr_coll *rr_coll_new(void) {
	rr_coll *c = (rr_coll *)calloc(1, sizeof(rr_coll));
	if (c) c->req = MPI_REQUEST_NULL;
	return c;
}

static void rr_coll_free(rr_coll *c) {
	if (!c) return;
	free(c->sbuf); free(c->rbuf); free(c->counts); free(c->displs); free(c->bbuf); free(c->tcounts);
	free(c);
}

// rr_reserve grows the scratch buffers: ns int64 in sbuf, nr in rbuf, m
// counts, b bytes. Only called with no operation in flight on c. Returns 0
// on success.
static int rr_reserve(rr_coll *c, long ns, long nr, int m, long b) {
	if (ns < 1) ns = 1;
	if (nr < 1) nr = 1;
	if (ns > c->scap) {
		long cap = ns + ns / 2;
		int64_t *s = (int64_t *)realloc(c->sbuf, cap * sizeof(int64_t));
		if (!s) return -1;
		c->sbuf = s; c->scap = cap;
	}
	if (nr > c->rcap) {
		long cap = nr + nr / 2;
		int64_t *r = (int64_t *)realloc(c->rbuf, cap * sizeof(int64_t));
		if (!r) return -1;
		c->rbuf = r; c->rcap = cap;
	}
	if (m > c->ccap) {
		int *a = (int *)realloc(c->counts, m * sizeof(int));
		if (!a) return -1;
		c->counts = a;
		int *d = (int *)realloc(c->displs, m * sizeof(int));
		if (!d) return -1;
		c->displs = d; c->ccap = m;
	}
	if (b < 1) b = 1;
	if (b > c->bcap) {
		char *p = (char *)realloc(c->bbuf, b);
		if (!p) return -1;
		c->bbuf = p; c->bcap = b;
	}
	return 0;
}

static int rr_test(rr_coll *c) { return MPI_Test(&c->req, &c->flag, &c->st); }

// rr_test_spin polls until the collective completes, MPI fails, or
// budget_ns has passed (at least one poll), in one cgo call, yielding
// between polls as *yield says (rr_yield).
static int rr_test_spin(rr_coll *c, int64_t budget_ns, int *yield) {
	int64_t end = 0;
	for (int i = 1;; i++) {
		int rc = MPI_Test(&c->req, &c->flag, &c->st);
		if (rc != MPI_SUCCESS || c->flag) return rc;
		if (budget_ns > 0 && !rr_yield(yield)) return MPI_SUCCESS;
		if (i % RR_CLOCK_EVERY == 0) {
			int64_t now = rr_now();
			if (end == 0) end = now + budget_ns;
			else if (now >= end) return MPI_SUCCESS;
		}
	}
}

static int rr_iallreduce(MPI_Comm comm, rr_coll *c, int n, int op) {
	c->flag = 0;
	return MPI_Iallreduce(c->sbuf, c->rbuf, n, MPI_INT64_T, rr_op(op), comm, &c->req);
}

// Typed collectives (comm.Collectives): MPI's own datatypes and
// reductions, and MPI's non-blocking collectives straight on the caller's
// (pinned) buffers, polled like the others. Datatypes and kinds are the
// Go side's codes (comm.Datatype; typedKind in coll_typed.go).
static MPI_Datatype rr_dtype(int t) {
	switch (t) {
	case 1: return MPI_UINT8_T; // comm.Byte: an integer type, so every reduction applies
	case 2: return MPI_INT32_T;
	case 3: return MPI_INT64_T;
	case 4: return MPI_UINT64_T;
	case 5: return MPI_FLOAT;
	case 6: return MPI_DOUBLE;
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Op rr_rop(int op) {
	switch (op) {
	case 6: return MPI_PROD;
	case 7: return MPI_BXOR;
	}
	return rr_op(op);
}

enum { RR_T_ALLREDUCE = 1, RR_T_REDUCE, RR_T_BCAST, RR_T_ALLGATHERV, RR_T_GATHERV, RR_T_SCATTERV, RR_T_ALLTOALLV, RR_T_REDUCE_SCATTER };

// rr_tcounts returns room for 4 x n ints in c (send counts, send
// displacements, receive counts, receive displacements), kept until the
// operation completes. NULL when out of memory.
static int *rr_tcounts(rr_coll *c, int n) {
	if (4 * n > c->tccap) {
		int *p = (int *)realloc(c->tcounts, sizeof(int) * 4 * (size_t)n);
		if (!p) return NULL;
		c->tcounts = p;
		c->tccap = 4 * n;
	}
	return c->tcounts;
}

// rr_ityped posts one typed collective. sbuf/rbuf may be NULL where the
// kind ignores them (or MPI_IN_PLACE when inplace); counts come in c->tcounts
// (n each: sc, sd, rc, rd); count is the element count of the buffers of the
// kinds without per-rank counts.
static int rr_ityped(MPI_Comm comm, rr_coll *c, int kind, int dtype, int op, int root, void *sbuf, void *rbuf,
		int count, int n, int inplace) {
	MPI_Datatype t = rr_dtype(dtype);
	int *sc = c->tcounts, *sd = sc + n, *rc = sd + n, *rd = rc + n;
	c->flag = 0;
	const void *s = inplace ? MPI_IN_PLACE : sbuf;
	switch (kind) {
	case RR_T_ALLREDUCE: return MPI_Iallreduce(s, rbuf, count, t, rr_rop(op), comm, &c->req);
	case RR_T_REDUCE: return MPI_Ireduce(sbuf, rbuf, count, t, rr_rop(op), root, comm, &c->req);
	case RR_T_BCAST: return MPI_Ibcast(sbuf, count, t, root, comm, &c->req);
	case RR_T_ALLGATHERV: return MPI_Iallgatherv(sbuf, count, t, rbuf, rc, rd, t, comm, &c->req);
	case RR_T_GATHERV: return MPI_Igatherv(sbuf, count, t, rbuf, rc, rd, t, root, comm, &c->req);
	case RR_T_SCATTERV: return MPI_Iscatterv(sbuf, sc, sd, t, rbuf, count, t, root, comm, &c->req);
	case RR_T_ALLTOALLV: return MPI_Ialltoallv(sbuf, sc, sd, t, rbuf, rc, rd, t, comm, &c->req);
	case RR_T_REDUCE_SCATTER: return MPI_Ireduce_scatter(sbuf, rbuf, rc, t, rr_rop(op), comm, &c->req);
	}
	return MPI_ERR_ARG;
}

static int rr_ibarrier(MPI_Comm comm, rr_coll *c) {
	c->flag = 0;
	return MPI_Ibarrier(comm, &c->req);
}

static int rr_iallgather_counts(MPI_Comm comm, rr_coll *c) {
	c->flag = 0;
	return MPI_Iallgather(&c->mycount, 1, MPI_INT, c->counts, 1, MPI_INT, comm, &c->req);
}

// rr_displs computes displacements from counts; returns the total, or -1
// when it does not fit in an int.
static long rr_displs(rr_coll *c, int size) {
	long total = 0;
	for (int i = 0; i < size; i++) {
		if (c->counts[i] < 0) return -1;
		c->displs[i] = (int)total;
		total += c->counts[i];
		if (total > 2147483647L) return -1;
	}
	return total;
}

static int rr_iallgatherv(MPI_Comm comm, rr_coll *c) {
	c->flag = 0;
	return MPI_Iallgatherv(c->sbuf, c->mycount, MPI_INT64_T, c->rbuf, c->counts, c->displs, MPI_INT64_T, comm, &c->req);
}

static int rr_ibcast_len(MPI_Comm comm, rr_coll *c, int root) {
	c->flag = 0;
	return MPI_Ibcast(&c->len, 1, MPI_INT64_T, root, comm, &c->req);
}

static int rr_ibcast_data(MPI_Comm comm, rr_coll *c, int n, int root) {
	c->flag = 0;
	return MPI_Ibcast(c->bbuf, n, MPI_BYTE, root, comm, &c->req);
}

// rr_split makes the child communicator and its inspection duplicate. Every
// member has already arrived (the caller exchanged colors first), so the
// blocking calls return promptly.
static int rr_split(MPI_Comm parent, int color, int key, MPI_Comm *child, MPI_Comm *insp) {
	int rc = MPI_Comm_split(parent, color, key, child);
	if (rc) return rc;
	MPI_Comm_set_errhandler(*child, MPI_ERRORS_RETURN);
	rc = MPI_Comm_dup(*child, insp);
	if (rc) return rc;
	return MPI_Comm_set_errhandler(*insp, MPI_ERRORS_RETURN);
}

static int rr_dup(MPI_Comm c, MPI_Comm *out) {
	int rc = MPI_Comm_dup(c, out);
	if (rc) return rc;
	return MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
}

static int rr_comm_free(MPI_Comm *c) { return MPI_Comm_free(c); }

static rr_p2p *rr_p2p_new(void) { return (rr_p2p *)calloc(1, sizeof(rr_p2p)); }
static void rr_p2p_free(rr_p2p *p) { if (p) { free(p->owned); free(p); } }

static int rr_isend(MPI_Comm comm, rr_p2p *p, void *buf, int n, int dest, int tag) {
	return MPI_Isend(buf, n, MPI_BYTE, dest, tag, comm, &p->req);
}

static int rr_irecv(MPI_Comm comm, rr_p2p *p, void *buf, int n, int src, int tag) {
	return MPI_Irecv(buf, n, MPI_BYTE, src, tag, comm, &p->req);
}

// rr_ipost_v posts a send or receive of the concatenation of n regions
// (absolute addresses and lengths) through one hindexed datatype on
// MPI_BOTTOM: no packing copy on either side. The datatype is freed at
// once; MPI keeps it until the request completes.
static int rr_ipost_v(MPI_Comm comm, rr_p2p *p, const MPI_Aint *addrs, const int *lens, int n, int peer, int tag, int recv) {
	MPI_Datatype t;
	int rc = MPI_Type_create_hindexed(n, lens, addrs, MPI_BYTE, &t);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Type_commit(&t);
	if (rc == MPI_SUCCESS) {
		if (recv) rc = MPI_Irecv(MPI_BOTTOM, 1, t, peer, tag, comm, &p->req);
		else rc = MPI_Isend(MPI_BOTTOM, 1, t, peer, tag, comm, &p->req);
	}
	MPI_Type_free(&t);
	return rc;
}

static int rr_p2p_test(rr_p2p *p) {
	int rc = MPI_Test(&p->req, &p->flag, &p->st);
	if (rc == MPI_SUCCESS && p->flag) {
		// Bytes received, for an MPI_BYTE receive and for an hindexed one
		// over MPI_BYTE (rr_ipost_v) alike: the standard asks for the
		// receive's datatype, Open MPI and MPICH count bytes either way.
		p->count = 0;
		MPI_Get_count(&p->st, MPI_BYTE, &p->count);
	}
	if (rc == MPI_ERR_IN_STATUS) rc = p->st.MPI_ERROR;
	return rc;
}

// rr_p2p_spin polls until the request completes, fails, or budget_ns has
// passed (at least one poll): a large transfer progresses in C, as in
// MPI_Wait, without a trip through Go per poll.
static int rr_p2p_spin(rr_p2p *p, int64_t budget_ns, int *yield) {
	int64_t end = 0;
	for (int i = 1;; i++) {
		int rc = rr_p2p_test(p);
		if (rc != MPI_SUCCESS || p->flag) return rc;
		if (budget_ns > 0 && !rr_yield(yield)) return MPI_SUCCESS;
		if (i % RR_CLOCK_EVERY == 0) {
			int64_t now = rr_now();
			if (end == 0) end = now + budget_ns;
			else if (now >= end) return MPI_SUCCESS;
		}
	}
}

// rr_p2p_spin_any polls every request of ps[0..n) (an array of rr_p2p
// pointers, passed as an integer so cgo checks no pointer on the hot
// path) until one completes or fails, or budget_ns has passed (at least
// one round, and only one without a budget): the index of the first that completed, -1 for none, and its
// MPI return code in *rc. Each test drives MPI's progress for all of
// them; the first to complete returns at once, whichever it is.
static int rr_p2p_spin_any(uintptr_t ps, int n, int64_t budget_ns, int *yield, int *rc) {
	rr_p2p **p = (rr_p2p **)ps;
	int64_t end = 0;
	*rc = MPI_SUCCESS;
	for (int round = 1;; round++) {
		for (int i = 0; i < n; i++) {
			int r = rr_p2p_test(p[i]);
			if (r != MPI_SUCCESS || p[i]->flag) {
				*rc = r;
				return i;
			}
		}
		if (budget_ns <= 0 || !rr_yield(yield)) return -1; // no budget: one round
		if (round % RR_CLOCK_EVERY == 0 || n >= RR_CLOCK_EVERY) {
			int64_t now = rr_now();
			if (end == 0) end = now + budget_ns;
			else if (now >= end) return -1;
		}
	}
}

static int rr_p2p_source(rr_p2p *p) { return p->st.MPI_SOURCE; }
static int rr_p2p_tag(rr_p2p *p) { return p->st.MPI_TAG; }

// rr_p2p_cancel asks MPI to withdraw a receive; the request must then be
// completed by polling (rr_p2p_cancel_poll). A receive that had matched
// is not withdrawn: it completes when its sender's bytes have arrived,
// which is never when the sender is frozen or gone, so the caller polls
// for a bounded time instead of calling MPI_Wait.
static int rr_p2p_cancel(rr_p2p *p) { return MPI_Cancel(&p->req); }

// rr_p2p_cancel_poll polls a cancelled receive once: after it returns 0
// with p->flag set, p->cancelled says whether the receive was withdrawn (1)
// or had already matched (0, and the request is complete with its status).
static int rr_p2p_cancel_poll(rr_p2p *p) {
	int rc = MPI_Test(&p->req, &p->flag, &p->st);
	if (rc || !p->flag) return rc;
	p->cancelled = 0;
	MPI_Test_cancelled(&p->st, &p->cancelled);
	if (!p->cancelled) {
		p->count = 0;
		MPI_Get_count(&p->st, MPI_BYTE, &p->count);
	}
	return 0;
}

// The inspection channel.
static rr_insp *rr_insp_new(MPI_Comm c) {
	rr_insp *in = (rr_insp *)calloc(1, sizeof(rr_insp));
	if (in) in->comm = c;
	return in;
}

static int rr_insp_post(rr_insp *in) {
	in->flag = 0;
	return MPI_Irecv(&in->nonce, 1, MPI_INT64_T, MPI_ANY_SOURCE, RR_TAG_REQ, in->comm, &in->req);
}

static int rr_insp_test(rr_insp *in) { return MPI_Test(&in->req, &in->flag, &in->st); }
static int rr_insp_source(rr_insp *in) { return in->st.MPI_SOURCE; }

// rr_insp_close withdraws the inspection receive and frees the channel;
// the duplicate itself only with keep_comm == 0 (an orphaned direct
// collective may still complete on it, and a request that completes with
// an error on a freed communicator reaches MPI's fatal error handler).
static int rr_insp_close(rr_insp *in, int keep_comm) {
	if (in->req != MPI_REQUEST_NULL) {
		MPI_Cancel(&in->req);
		MPI_Wait(&in->req, MPI_STATUS_IGNORE);
	}
	int rc = keep_comm ? MPI_SUCCESS : MPI_Comm_free(&in->comm);
	free(in);
	return rc;
}

// rr_insp_request sends an inspection request (the nonce) to dest.
static int rr_insp_request(rr_insp *in, rr_p2p *p, int dest) {
	return MPI_Isend(&p->word, 1, MPI_INT64_T, dest, RR_TAG_REQ, in->comm, &p->req);
}

// rr_insp_reply sends p->owned (n bytes) to dest as an inspection reply.
static int rr_insp_reply(rr_insp *in, rr_p2p *p, int n, int dest) {
	return MPI_Isend(p->owned, n, MPI_BYTE, dest, RR_TAG_REP, in->comm, &p->req);
}

// rr_insp_take receives a pending reply from src, if one has arrived:
// *out is a malloc'd buffer of *n bytes (the caller frees it), or NULL.
static int rr_insp_take(rr_insp *in, int src, char **out, int *n) {
	int flag = 0;
	MPI_Message msg;
	MPI_Status st;
	*out = NULL; *n = 0;
	int rc = MPI_Improbe(src, RR_TAG_REP, in->comm, &flag, &msg, &st);
	if (rc || !flag) return rc;
	MPI_Get_count(&st, MPI_BYTE, n);
	*out = (char *)malloc(*n > 0 ? *n : 1);
	return MPI_Mrecv(*out, *n, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
}

// ---- Direct collectives --------------------------------------------------
//
// A small group's Barrier, AllreduceInt64, AllgatherInt64s and Bcast are one
// round of point-to-point messages on the control duplicate: every rank
// sends one message to every other rank and receives one from each (Bcast:
// the root sends one to each), with MPI_Isend and MPI_Irecv completed by
// MPI_Testsome. Measured here, that round costs about what the blocking MPI
// collective costs (and less than two of them, which the allgather pair
// needs), while MPI's non-blocking collectives (libnbc) cost 2-3x the
// blocking ones: the non-blocking forms are what a binding that honours
// deadlines must poll. Each message is a header (h0 = seq << 8 | kind,
// h1 = shape) and its payload, all in bytes. A payload longer than
// RR_INLINE_BYTES (an allgather contribution, a Bcast) travels as a
// header-only message followed by the payload on RR_TAG_DXO. The receiver
// checks every header against its own collective: a mismatch is a desync
// (dx->bad).

enum { RR_INLINE = 256, RR_INLINE_BYTES = RR_INLINE * 8 };
enum { RR_DX_BARRIER = 1, RR_DX_ALLREDUCE = 2, RR_DX_ALLGATHER = 3, RR_DX_BCAST = 4, RR_DX_ALLTOALL = 5 };
enum { RR_BAD_HEADER = 1, RR_BAD_LENGTH = 2 };

typedef struct {
	MPI_Comm comm;
	int rank, size, npeer;
	// Requests: [0, npeer) receives, [npeer, 2 npeer) sends, [2 npeer,
	// 3 npeer) overflow sends, [3 npeer, 4 npeer) overflow receives;
	// MPI_REQUEST_NULL when unused.
	MPI_Request *reqs;
	MPI_Status *sts;
	int *idx;
	int pending;   // requests not complete yet
	int flag;      // the collective completed
	int kind;
	int64_t h0, h1; // this rank's header
	long plen;     // this rank's payload in bytes (after the header in sbuf)
	int64_t *sbuf; long scap;
	// rbuf: npeer slots of rslot int64s (header + payload), peer i's slot at
	// i * rslot; obuf[i]: peer i's overflow payload (ocap[i] bytes of room).
	int64_t *rbuf; long rcap; long rslot;
	char **obuf; long *ocap;
	int64_t *got;  // per peer: payload bytes received (allgather, bcast)
	// A message that did not match this rank's collective: which peer, its
	// header and length in bytes (-1: longer than the receive).
	int bad, bad_peer, bad_len;
	int64_t bad_h0, bad_h1;
	// A typed all-to-all's blocks (RR_DX_ALLTOALL) travel as a_t, whose
	// elements are a_es bytes; got then counts elements.
	MPI_Datatype a_t; int a_es;
	int *ucounts;  // 4 x size: a direct typed allreduce's uniform counts
	int reduced;   // the direct typed allreduce reduced within its first call
} rr_dx;

static int rr_dx_peer(rr_dx *d, int i) { return i < d->rank ? i : i + 1; }
static int rr_dx_index(rr_dx *d, int r) { return r < d->rank ? r : r - 1; }

static void rr_dx_free(rr_dx *d) {
	if (!d) return;
	if (d->obuf) for (int i = 0; i < d->npeer; i++) free(d->obuf[i]);
	free(d->obuf); free(d->ocap); free(d->got);
	free(d->reqs); free(d->sts); free(d->idx); free(d->sbuf); free(d->rbuf); free(d->ucounts);
	free(d);
}

static rr_dx *rr_dx_new(MPI_Comm comm, int rank, int size) {
	rr_dx *d = (rr_dx *)calloc(1, sizeof(rr_dx));
	if (!d) return NULL;
	d->comm = comm; d->rank = rank; d->size = size; d->npeer = size - 1;
	int n = d->npeer > 0 ? d->npeer : 1;
	d->reqs = (MPI_Request *)malloc(4 * n * sizeof(MPI_Request));
	d->sts = (MPI_Status *)malloc(4 * n * sizeof(MPI_Status));
	d->idx = (int *)malloc(4 * n * sizeof(int));
	d->obuf = (char **)calloc(n, sizeof(char *));
	d->ocap = (long *)calloc(n, sizeof(long));
	d->got = (int64_t *)calloc(n, sizeof(int64_t));
	d->ucounts = (int *)calloc(4 * (size_t)size, sizeof(int));
	if (!d->reqs || !d->sts || !d->idx || !d->obuf || !d->ocap || !d->got || !d->ucounts) { rr_dx_free(d); return NULL; }
	for (int i = 0; i < 4 * n; i++) d->reqs[i] = MPI_REQUEST_NULL;
	return d;
}

// rr_dx_reserve makes room for ns int64s of payload sent and rslot int64s
// per peer slot received. Only with no collective in flight. 0 on success.
static int rr_dx_reserve(rr_dx *d, long ns, long rslot) {
	if (ns + 2 > d->scap) {
		long cap = (ns + 2) + (ns + 2) / 2;
		int64_t *b = (int64_t *)realloc(d->sbuf, cap * sizeof(int64_t));
		if (!b) return -1;
		d->sbuf = b; d->scap = cap;
	}
	long need = rslot * (d->npeer > 0 ? d->npeer : 1);
	if (need > d->rcap) {
		long cap = need + need / 2;
		int64_t *b = (int64_t *)realloc(d->rbuf, cap * sizeof(int64_t));
		if (!b) return -1;
		d->rbuf = b; d->rcap = cap;
	}
	d->rslot = rslot;
	return 0;
}

static void rr_dx_start(rr_dx *d, int kind, int64_t h0, int64_t h1, long plen) {
	d->kind = kind; d->h0 = h0; d->h1 = h1; d->plen = plen;
	d->sbuf[0] = h0; d->sbuf[1] = h1;
	d->flag = 0; d->bad = 0; d->pending = 0;
}

// rr_dx_send sends this rank's message to peer index i: inline, or a
// header followed by an overflow message.
static int rr_dx_send(rr_dx *d, int i) {
	int np = d->npeer, inl = d->plen <= RR_INLINE_BYTES || d->kind == RR_DX_ALLREDUCE;
	int rc = MPI_Isend(d->sbuf, inl ? 16 + (int)d->plen : 16, MPI_BYTE, rr_dx_peer(d, i), RR_TAG_DX, d->comm, &d->reqs[np + i]);
	if (rc) return rc;
	d->pending++;
	if (!inl) {
		rc = MPI_Isend(d->sbuf + 2, (int)d->plen, MPI_BYTE, rr_dx_peer(d, i), RR_TAG_DXO, d->comm, &d->reqs[2 * np + i]);
		if (rc) return rc;
		d->pending++;
	}
	return MPI_SUCCESS;
}

static int rr_dx_recv(rr_dx *d, int i) {
	int rc = MPI_Irecv(d->rbuf + (long)i * d->rslot, (int)(d->rslot * 8), MPI_BYTE, rr_dx_peer(d, i), RR_TAG_DX, d->comm, &d->reqs[i]);
	if (!rc) d->pending++;
	return rc;
}

// rr_dx_post starts an all-to-all collective (barrier, allreduce,
// allgather): header (h0, h1), the plen payload bytes already in sbuf + 2,
// each peer's message received into its slot of rslot int64s (reserved).
// Receives are posted first so that messages arrive expected.
static int rr_dx_post(rr_dx *d, int kind, int64_t h0, int64_t h1, long plen) {
	rr_dx_start(d, kind, h0, h1, plen);
	for (int i = 0; i < d->npeer; i++) {
		int rc = rr_dx_recv(d, i);
		if (rc) return rc;
	}
	for (int i = 0; i < d->npeer; i++) {
		int rc = rr_dx_send(d, i);
		if (rc) return rc;
	}
	if (d->pending == 0) d->flag = 1;
	return MPI_SUCCESS;
}

// rr_dx_bcast_post starts a Bcast from root: on root, plen bytes at
// sbuf + 2 go to every peer; elsewhere one message from root is expected.
static int rr_dx_bcast_post(rr_dx *d, int root, int64_t h0, long plen) {
	rr_dx_start(d, RR_DX_BCAST, h0, d->rank == root ? plen : -1, plen);
	if (d->rank == root) {
		for (int i = 0; i < d->npeer; i++) {
			int rc = rr_dx_send(d, i);
			if (rc) return rc;
		}
	} else {
		int rc = rr_dx_recv(d, rr_dx_index(d, root));
		if (rc) return rc;
	}
	if (d->pending == 0) d->flag = 1;
	return MPI_SUCCESS;
}

static void rr_dx_bad(rr_dx *d, int why, int i, int64_t h0, int64_t h1, int len) {
	d->bad = why; d->bad_peer = rr_dx_peer(d, i); d->bad_h0 = h0; d->bad_h1 = h1; d->bad_len = len;
}

// rr_dx_received checks peer i's message (st) against this collective and
// posts the overflow receive it announces. Returns an MPI code.
static int rr_dx_received(rr_dx *d, int i, MPI_Status *st) {
	int bytes = 0;
	MPI_Get_count(st, MPI_BYTE, &bytes);
	int64_t *m = d->rbuf + (long)i * d->rslot;
	if (bytes < 16) { rr_dx_bad(d, RR_BAD_LENGTH, i, 0, 0, bytes); return MPI_SUCCESS; }
	if (m[0] != d->h0) { rr_dx_bad(d, RR_BAD_HEADER, i, m[0], m[1], bytes); return MPI_SUCCESS; }
	long want;
	if (d->kind == RR_DX_ALLGATHER || d->kind == RR_DX_BCAST) {
		// h1: values (allgather) or bytes (bcast) that follow.
		long unit = d->kind == RR_DX_ALLGATHER ? 8 : 1;
		if (m[1] < 0 || m[1] > (2147483647L - 16) / unit) { rr_dx_bad(d, RR_BAD_HEADER, i, m[0], m[1], bytes); return MPI_SUCCESS; }
		long plen = m[1] * unit;
		d->got[i] = plen;
		if (plen > RR_INLINE_BYTES) {
			if (bytes != 16) { rr_dx_bad(d, RR_BAD_LENGTH, i, m[0], m[1], bytes); return MPI_SUCCESS; }
			if (plen > d->ocap[i]) {
				free(d->obuf[i]);
				d->ocap[i] = 0;
				d->obuf[i] = (char *)malloc(plen + plen / 2);
				if (!d->obuf[i]) return MPI_ERR_NO_MEM;
				d->ocap[i] = plen + plen / 2;
			}
			int rc = MPI_Irecv(d->obuf[i], (int)plen, MPI_BYTE, rr_dx_peer(d, i), RR_TAG_DXO, d->comm, &d->reqs[3 * d->npeer + i]);
			if (rc) return rc;
			d->pending++;
			return MPI_SUCCESS;
		}
		want = 16 + plen;
	} else if (d->kind == RR_DX_ALLTOALL) {
		// A header only: the block itself travels on RR_TAG_DXA.
		if (m[1] != d->h1) { rr_dx_bad(d, RR_BAD_HEADER, i, m[0], m[1], bytes); return MPI_SUCCESS; }
		want = 16;
	} else {
		if (m[1] != d->h1) { rr_dx_bad(d, RR_BAD_HEADER, i, m[0], m[1], bytes); return MPI_SUCCESS; }
		want = 16 + d->plen;
	}
	if (bytes != want) rr_dx_bad(d, RR_BAD_LENGTH, i, m[0], m[1], bytes);
	return MPI_SUCCESS;
}

// rr_dx_spin polls the collective until it completes, a message does not
// match (d->bad), MPI fails, or budget_ns has passed (at least one poll).
static int rr_dx_spin(rr_dx *d, int64_t budget_ns, int *yield) {
	int n = 4 * d->npeer, np = d->npeer;
	int64_t end = 0;
	for (int it = 1; !d->flag; it++) {
		int out = 0;
		int rc = MPI_Testsome(n, d->reqs, &out, d->idx, d->sts);
		if (rc == MPI_ERR_IN_STATUS) {
			// A message longer than this collective's receive (a peer in
			// another collective) is a mismatch like any other; other
			// errors are MPI's.
			for (int k = 0; k < out; k++) {
				int err = d->sts[k].MPI_ERROR, cls = 0;
				if (err == MPI_SUCCESS) continue;
				MPI_Error_class(err, &cls);
				int j = d->idx[k];
				if (cls != MPI_ERR_TRUNCATE || (j >= np && j < 3 * np)) return err;
				int i = j < np ? j : j - 3 * np;
				int64_t *m = d->rbuf + (long)i * d->rslot;
				rr_dx_bad(d, RR_BAD_LENGTH, i, j < np ? m[0] : d->h0, j < np ? m[1] : d->got[i], -1);
				return MPI_SUCCESS;
			}
		}
		if (rc != MPI_SUCCESS) return rc;
		if (out == MPI_UNDEFINED) out = 0;
		for (int k = 0; k < out; k++) {
			int j = d->idx[k];
			d->pending--;
			if (j < np) {
				rc = rr_dx_received(d, j, &d->sts[k]);
				if (rc) return rc;
			} else if (j >= 3 * np) {
				int i = j - 3 * np, n = 0;
				if (d->kind == RR_DX_ALLTOALL) {
					MPI_Get_count(&d->sts[k], d->a_t, &n);
					if (n != d->got[i]) rr_dx_bad(d, RR_BAD_LENGTH, i, d->h0, d->h1, n == MPI_UNDEFINED || n > 2147483647 / d->a_es ? -1 : n * d->a_es);
				} else {
					MPI_Get_count(&d->sts[k], MPI_BYTE, &n);
					if (n != d->got[i]) rr_dx_bad(d, RR_BAD_LENGTH, i, d->h0, d->got[i], n);
				}
			}
			if (d->bad) return MPI_SUCCESS;
		}
		if (d->pending == 0) { d->flag = 1; break; }
		if (budget_ns > 0 && !rr_yield(yield)) break;
		if (it % RR_CLOCK_EVERY == 0) {
			int64_t now = rr_now();
			if (end == 0) end = now + budget_ns;
			else if (now >= end) break;
		}
	}
	return MPI_SUCCESS;
}

// rr_dx_run_u posts an all-to-all collective (rr_dx_post) and spins on it
// (rr_dx_spin): the whole of a collective whose peers are there, in one cgo
// call. The state is passed as an integer, so cgo checks no pointer
// argument on the hot path (d is C memory anyway).
static int rr_dx_run_u(uintptr_t p, int kind, int64_t h0, int64_t h1, long plen, int64_t budget_ns, uintptr_t yield) {
	rr_dx *d = (rr_dx *)p;
	int rc = rr_dx_post(d, kind, h0, h1, plen);
	if (rc == MPI_SUCCESS && !d->flag) rc = rr_dx_spin(d, budget_ns, (int *)yield);
	return rc;
}

// rr_dx_bcast_run_u is rr_dx_run_u for a Bcast from root.
static int rr_dx_bcast_run_u(uintptr_t p, int root, int64_t h0, long plen, int64_t budget_ns, uintptr_t yield) {
	rr_dx *d = (rr_dx *)p;
	int rc = rr_dx_bcast_post(d, root, h0, plen);
	if (rc == MPI_SUCCESS && !d->flag) rc = rr_dx_spin(d, budget_ns, (int *)yield);
	return rc;
}

// rr_treduce reduces the n contributions of a direct typed allreduce,
// gathered in rank order at src (bytes each), into out with MPI's own
// local reduction, in rank order: out = x0, then MPI_Reduce_local(x_r,
// out), which computes x_r op out. The ops are commutative, so that is
// ((x0 op x1) op x2) ...: the same bits on every rank, floating-point
// sums included.
static int rr_treduce(const char *src, int n, long bytes, int count, int dtype, int op, void *out) {
	MPI_Datatype t = rr_dtype(dtype);
	MPI_Op o = rr_rop(op);
	memcpy(out, src, (size_t)bytes);
	for (int r = 1; r < n; r++) {
		int rc = MPI_Reduce_local(src + (long)r * bytes, out, count, t, o);
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_SUCCESS;
}

// rr_dx_a2a_run_u runs a typed all-to-all over the direct round: a
// header to every peer and, on RR_TAG_DXA, exactly one block message for
// it (zero elements included) straight from in; each peer's block is
// received straight into its place in out, the receives posted first (as
// MPI's pairwise exchange does: a receive posted after the header would
// cost the rendezvous a round trip); this rank's own block is copied. A
// peer in another collective (its header), or one that sends another
// count than this rank expects (the block's length), is a desync; out's
// contents are then undefined, as MPI leaves them on an error. c4 holds n
// send counts, send displacements, receive counts and receive
// displacements, in elements of datatype dtype (es bytes); in and out stay
// pinned until the collective completes.
static int rr_dx_a2a_run_u(uintptr_t p, int64_t h0, int64_t h1, const char *in, char *out, const int *c4, int dtype, int es,
		int64_t budget_ns, uintptr_t yield) {
	rr_dx *d = (rr_dx *)p;
	int n = d->size, np = d->npeer, me = d->rank;
	const int *sc = c4, *sd = c4 + n, *rcnt = c4 + 2 * n, *rd = c4 + 3 * n;
	rr_dx_start(d, RR_DX_ALLTOALL, h0, h1, 0);
	d->a_t = rr_dtype(dtype);
	d->a_es = es;
	for (int i = 0; i < np; i++) {
		int peer = rr_dx_peer(d, i);
		int rc = rr_dx_recv(d, i);
		if (rc) return rc;
		d->got[i] = rcnt[peer];
		rc = MPI_Irecv(out + (long)rd[peer] * es, rcnt[peer], d->a_t, peer, RR_TAG_DXA, d->comm, &d->reqs[3 * np + i]);
		if (rc) return rc;
		d->pending++;
	}
	for (int i = 0; i < np; i++) {
		int peer = rr_dx_peer(d, i);
		int rc = rr_dx_send(d, i);
		if (rc) return rc;
		rc = MPI_Isend(in + (long)sd[peer] * es, sc[peer], d->a_t, peer, RR_TAG_DXA, d->comm, &d->reqs[2 * np + i]);
		if (rc) return rc;
		d->pending++;
	}
	if (sc[me] > 0) memmove(out + (long)rd[me] * es, in + (long)sd[me] * es, (size_t)sc[me] * (size_t)es);
	if (d->pending == 0) d->flag = 1;
	int rc = MPI_SUCCESS;
	if (!d->flag) rc = rr_dx_spin(d, budget_ns, (int *)yield);
	return rc;
}

// rr_dx_tallreduce_run_u runs a direct typed allreduce in one cgo call:
// this rank's count elements of dtype, already copied to in (C memory),
// go to every peer as an all-to-all of uniform blocks gathered in rank
// order into gathered (C memory, size x count elements); when the round
// completes within the spin they are reduced into out in rank order
// (rr_treduce) and d->reduced is set, else the caller waits and reduces.
// out is only written during the call, so it needs no pin.
static int rr_dx_tallreduce_run_u(uintptr_t p, int64_t h0, int64_t h1, const char *in, char *gathered, int count, int dtype, int es,
		int op, void *out, int64_t budget_ns, uintptr_t yield) {
	rr_dx *d = (rr_dx *)p;
	int n = d->size;
	int *c4 = d->ucounts;
	for (int r = 0; r < n; r++) {
		c4[r] = count; c4[n + r] = 0; c4[2 * n + r] = count; c4[3 * n + r] = r * count;
	}
	d->reduced = 0;
	int rc = rr_dx_a2a_run_u(p, h0, h1, in, gathered, c4, dtype, es, budget_ns, yield);
	if (rc != MPI_SUCCESS || !d->flag) return rc;
	d->reduced = 1;
	if (count == 0) return MPI_SUCCESS;
	return rr_treduce(gathered, n, (long)count * es, count, dtype, op, out);
}

// rr_dx_done reports (1) whether every request of an abandoned collective
// has completed (so its buffers can be freed), testing each once. A request
// that completes with an error (a longer message from a peer that went on
// to another collective) is complete too: MPI has released it.
static int rr_dx_done(rr_dx *d) {
	int done = 1;
	for (int i = 0; i < 4 * d->npeer; i++) {
		if (d->reqs[i] == MPI_REQUEST_NULL) continue;
		int flag = 0;
		MPI_Status st;
		int rc = MPI_Test(&d->reqs[i], &flag, &st);
		if (rc != MPI_SUCCESS) d->reqs[i] = MPI_REQUEST_NULL;
		else if (!flag) done = 0;
	}
	return done;
}

static int rr_abort(MPI_Comm c, int code) { return MPI_Abort(c, code); }


#endif
