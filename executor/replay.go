package executor

import (
	"fmt"
	"slices"
	"strings"
)

// Replay names an old bug the runtime can bring back on purpose
// (DESIGN.md §7), so that regression tests can prove they catch it.
type Replay string

// The named replays.
const (
	// UnclampedPoll: the idle loop calls the CTX status check with
	// at_least 1 and the poll helper has no clamp (seed 000): with nothing
	// in flight every idle iteration sleeps the whole sender wait slice.
	UnclampedPoll Replay = "unclamped-poll"
	// NoIdleReap: a single-rank sync CTX never reaps when idle (seed 001):
	// completed sends pin their blocks until admission stops.
	NoIdleReap Replay = "no-idle-reap"
	// UnsafeIdleReap: multi-rank sync ranks poll status when idle (the guard
	// removed): an idle rank enters the status consensus over its executor
	// group while a peer is in a rank-local sync receive.
	UnsafeIdleReap Replay = "unsafe-idle-reap"
	// LocalAdmissionGate: a rank whose own pool cannot fit the next request
	// enters the status check to reap, instead of agreeing on admission.
	LocalAdmissionGate Replay = "local-admission-gate"
	// LocalErrorCollective: a rank that sees a rank-local transfer error
	// reports it through a collective of its own instead of the outcome
	// consensus.
	LocalErrorCollective Replay = "local-error-collective"
	// AdpEarlyOutcome: under GEN attention-DP a request's transfer is
	// decided on the first report of a rank that holds it, not once every
	// holder reported (the attention-DP deadlock before its fix): the TP
	// siblings of one DP index agree in different iterations, so the group
	// decodes a request while one of them still receives it, and their
	// next collectives differ.
	AdpEarlyOutcome Replay = "adp-early-outcome"
	// BlockingOutcomes: every async CTX iteration waits, in its status
	// check's rank-local poll, for the outcome of every send it holds
	// (bounded by the sender wait slice) before it agrees outcomes and
	// moves on: a blocking per-iteration outcome agreement, the shape of
	// TensorRT-LLM #15139 (made asynchronous again by #16634). The next
	// prefill no longer overlaps the sends in flight: a throughput cost.
	// The ranks of a group that hold different sends reach the consensus
	// apart, so where one's wait outlasts the collective timeout its peers
	// end in ErrCollectiveTimeout (#15139's runs timed out too). What cost
	// #15139 its throughput, CTX PP stages entering the synchronous PP
	// agreement apart (#16567), needs pipelined PP stages; here a group's
	// stages run one loop in lockstep, so the fixed build's per-iteration
	// agreement over TP then PP is already that synchronous rendezvous,
	// and free.
	BlockingOutcomes Replay = "blocking-outcomes"
	// IdleMaxPoll: every async GEN iteration combines each rank's own idle
	// flag (nothing of its own to receive or decode) over the executor
	// group with an allreduce(MAX), and when some rank is idle every rank,
	// busy ones too, checks status with at_least 1: a busy rank's poll
	// then waits for one of its transfers to end before it decodes (up to
	// the GEN poll interval). The shape of TensorRT-LLM #17299 (nvbugs
	// 6527301), where the MAX of one rank's idle flag sent every rank into
	// the GEN status check's full 5 s poll; its fix packs the status bits
	// into one allreduce(BOR). Here the fixed build has no such collective
	// at all: an async GEN check polls at_least 0 on every rank, every
	// iteration. Only under attention-DP do one group's ranks hold
	// different requests, so only there can one be idle while another is
	// busy.
	IdleMaxPoll Replay = "idle-max-poll"
	// DeadlinesWhenBusy: a rank checks its transfers' deadlines only in
	// iterations that executed a batch; once idle, a transfer that never
	// completes is never cancelled, and the run lasts until its own
	// deadline. The shape of TensorRT-LLM #17124, where a wedged KV
	// transfer ran to the harness's 10,800 s timeout because the PP loop
	// reached its transfer-timeout check only when a batch executed; its
	// fix checks the deadline every iteration, idle or not, as the fixed
	// build here does on every pump.
	DeadlinesWhenBusy Replay = "deadlines-when-busy"
	// SilentStartFailure: a CTX rank that cannot start a transfer fails
	// its send session without telling its GEN peers, who wait for bytes
	// that never come until their transfer deadline, holding the
	// request's blocks. The shape of vLLM #50754: in push mode the decode
	// side counts the notifications of the writes, and when the prefill
	// side could not start one it logged and moved on, so the count was
	// never reached and the request hung until its lease expired; the fix
	// has the sender report a transfer it could not start, as the fixed
	// build here tells every GEN peer of a failed send (a Cancel with the
	// failure, stopAll), so the GEN side applies its policy at once.
	SilentStartFailure Replay = "silent-start-failure"
	// FillGateGather: under GEN attention-DP every iteration each rank
	// shares its fill state (does its DP index need a dummy request) with
	// the group, and a rank-local gate picks the collective: a rank with
	// nothing of its own sends it "pickled", a byte allgather, the others
	// as a raw int64 allgather of the same 16 bytes. The shape of
	// TensorRT-LLM #19435: MPI matches the two by order on one
	// communicator, and the payloads mismatch silently. Checked mode names
	// both call sites and both datatypes; unchecked, the bytes go through.
	// The fixed build never lets local state choose a collective's kind
	// or datatype (DESIGN.md §1).
	FillGateGather Replay = "fill-gate-gather"
	// QueueSizedCollective: an async GEN rank agrees on its transfers
	// only when its own queue of transfers over is non-empty, and first
	// reduces a vector shaped by that queue's local length: a rank whose
	// queue is empty skips both. The shape of SGLang #36928, where a TP
	// decode worker's preallocation and transfer queues each issued an
	// all_reduce sized by the local queue and skipped it when the queue
	// was empty: TP ranks that saw different queue states entered
	// different collective sequences or shapes and blocked each other for
	// good. The fixed build, as SGLang's fix, keeps a rank-consistent
	// sequence of fixed shape: every rank checks every iteration, and the
	// consensus carries each rank's words in one allgather.
	QueueSizedCollective Replay = "queue-sized-collective"
	// ZeroTokenSkip: under GEN attention-DP with EP, a rank whose DP
	// index has no token in a decode step skips the step's EP dispatch
	// instead of joining it with a dummy step. The shape of vLLM #43547,
	// where a zero-token MoE+DP rank returned early and skipped the
	// per-step DP coordination collective (the dummy step that would join
	// it ran for one launcher backend only): each such step left it one
	// collective behind, until a reduce_scatter deadlocked about an hour
	// in. The fix (vLLM #44601, #51984), as the fixed build here: every
	// zero-token rank runs a dummy step, so all ranks stay in lockstep.
	ZeroTokenSkip Replay = "zero-token-skip"
)

// Replays lists every replay name.
var Replays = []Replay{UnclampedPoll, NoIdleReap, UnsafeIdleReap, LocalAdmissionGate, LocalErrorCollective, AdpEarlyOutcome, BlockingOutcomes, IdleMaxPoll, DeadlinesWhenBusy, SilentStartFailure, FillGateGather, QueueSizedCollective, ZeroTokenSkip}

// ParseReplay checks a replay name; the error lists the valid ones.
func ParseReplay(s string) (Replay, error) {
	r := Replay(strings.TrimSpace(s))
	if slices.Contains(Replays, r) {
		return r, nil
	}
	names := make([]string, len(Replays))
	for i, x := range Replays {
		names[i] = string(x)
	}
	return "", fmt.Errorf("executor: unknown replay %q: valid replays are %s", s, strings.Join(names, ", "))
}

// ReplaySet is the set of replays switched on.
type ReplaySet map[Replay]bool

// On reports whether r is switched on.
func (s ReplaySet) On(r Replay) bool { return s[r] }

func (s ReplaySet) String() string {
	var names []string
	for _, r := range Replays {
		if s[r] {
			names = append(names, string(r))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}
