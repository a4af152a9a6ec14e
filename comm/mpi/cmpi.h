// C helpers of the MPI binding (included by the cgo files of this package).
#ifndef RANKRUN_CMPI_H
#define RANKRUN_CMPI_H
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>

// Every handle, constant and buffer that MPI touches lives in C memory (the
// structs below are C.malloc'd), so a call from Go passes only C pointers:
// nothing escapes, nothing is allocated on the Go heap per call, and an
// abandoned non-blocking operation can keep its buffers for as long as MPI
// needs them.

enum { RR_TAG_REQ = 1, RR_TAG_REP = 2 };

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

static int rr_local_rank(int *lrank) {
	MPI_Comm node;
	int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	if (rc) return rc;
	rc = MPI_Comm_rank(node, lrank);
	MPI_Comm_free(&node);
	return rc;
}

static rr_coll *rr_coll_new(void) { return (rr_coll *)calloc(1, sizeof(rr_coll)); }

static void rr_coll_free(rr_coll *c) {
	if (!c) return;
	free(c->sbuf); free(c->rbuf); free(c->counts); free(c->displs); free(c->bbuf);
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

// rr_test_spin polls up to spins times (one cgo call for a burst of polls:
// a small collective completes in a handful of MPI_Test calls).
static int rr_test_spin(rr_coll *c, int spins) {
	int rc = MPI_SUCCESS;
	for (int i = 0; i < spins; i++) {
		rc = MPI_Test(&c->req, &c->flag, &c->st);
		if (rc != MPI_SUCCESS || c->flag) break;
	}
	return rc;
}

static int rr_iallreduce(MPI_Comm comm, rr_coll *c, int n, int op) {
	c->flag = 0;
	return MPI_Iallreduce(c->sbuf, c->rbuf, n, MPI_INT64_T, rr_op(op), comm, &c->req);
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

static int rr_p2p_test(rr_p2p *p) {
	int rc = MPI_Test(&p->req, &p->flag, &p->st);
	if (rc == MPI_SUCCESS && p->flag) {
		p->count = 0;
		MPI_Get_count(&p->st, MPI_BYTE, &p->count);
	}
	if (rc == MPI_ERR_IN_STATUS) rc = p->st.MPI_ERROR;
	return rc;
}

// rr_p2p_test_spin polls up to spins times (Wait's burst, as rr_test_spin).
static int rr_p2p_test_spin(rr_p2p *p, int spins) {
	int rc = MPI_SUCCESS;
	for (int i = 0; i < spins; i++) {
		rc = rr_p2p_test(p);
		if (rc != MPI_SUCCESS || p->flag) break;
	}
	return rc;
}

static int rr_p2p_source(rr_p2p *p) { return p->st.MPI_SOURCE; }
static int rr_p2p_tag(rr_p2p *p) { return p->st.MPI_TAG; }

// rr_p2p_cancel withdraws a receive: after it returns 0, p->cancelled says
// whether the receive was withdrawn (1) or had already matched (0, and the
// request is complete with its status).
static int rr_p2p_cancel(rr_p2p *p) {
	int rc = MPI_Cancel(&p->req);
	if (rc) return rc;
	rc = MPI_Wait(&p->req, &p->st);
	if (rc) return rc;
	p->flag = 1;
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

static int rr_insp_close(rr_insp *in) {
	if (in->req != MPI_REQUEST_NULL) {
		MPI_Cancel(&in->req);
		MPI_Wait(&in->req, MPI_STATUS_IGNORE);
	}
	int rc = MPI_Comm_free(&in->comm);
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

static int rr_abort(MPI_Comm c, int code) { return MPI_Abort(c, code); }

static void rr_yield(void) { sched_yield(); }
#endif
