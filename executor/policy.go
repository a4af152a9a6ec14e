package executor

import (
	"fmt"

	"github.com/rankrun/rankrun/topology"
)

// The executor's decisions, as pure functions of what they may depend on
// (DESIGN.md §6): the loops gather the inputs and act on the outputs, so
// that a table test covers every row and every replay, and a property test
// checks that no multi-rank collective is chosen from a rank-local fact.

// ProgressInput is everything the per-iteration transfer-progress decision
// may read. Agreed fields are identical on every rank of the executor
// group (configuration, or values a collective produced); local fields are
// this rank's own and may choose only actions that enter no collective, or
// that enter them only within a scope where they are agreed.
type ProgressInput struct {
	Role       topology.Role
	Sync       bool // agreed (configuration): GEN receives in a rank-local blocking receive
	GroupRanks int  // agreed (configuration): ranks in the executor group
	// Busy (agreed): the iteration admitted work (CTX), or admitted or
	// decodes work (GEN, before its decode step).
	Busy bool
	// AdmissionBlocked (agreed): requests wait and the group agreed none
	// fits its pools.
	AdmissionBlocked bool
	// Draining (agreed): the decision is taken at the iteration's
	// termination point, after its progress point: every request was taken
	// in, none waits, and the group agreed some rank still holds transfers.
	Draining bool
	// SendsHeld (local): this CTX rank holds send sessions.
	SendsHeld bool
	// Sessions (local): the send sessions this CTX rank holds. Only the
	// blocking-outcomes replay reads it.
	Sessions int
	// ScopeHolds (agreed within the rank's consensus scope): this GEN
	// rank's scope holds receive sessions. Sessions start on admission and
	// end on the scope's agreement, so every rank of the scope sees the
	// same answer.
	ScopeHolds bool
	// BusyLocally (local): this rank has work of its own. Only the
	// unsafe-idle-reap replay reads it.
	BusyLocally bool
	// NewLocalFailures (local): transfers that failed on this rank since
	// the last iteration. Only the local-error-collective replay reads it.
	NewLocalFailures int
	// SomeRankIdle (agreed: an allreduce(MAX) of each rank's own idle
	// flag over the executor group): some rank of the group has nothing
	// of its own. Only the idle-max-poll replay computes and reads it.
	SomeRankIdle bool
	// QueueLen (local): this rank's transfers over but not yet agreed.
	// Only the queue-sized-collective replay reads it.
	QueueLen int
	Replays  ReplaySet
}

// CheckScope says over which communicators a status check agrees.
type CheckScope uint8

const (
	// OwnScope: the rank's consensus scope (DESIGN.md §4).
	OwnScope CheckScope = iota
	// ExecutorScope: the whole executor group (only the unsafe-idle-reap
	// replay: a check whose collectives span ranks that may be in a
	// rank-local receive).
	ExecutorScope
)

// ProgressAction is what an iteration does about transfer progress.
type ProgressAction struct {
	// Check: run a status check (CTX: CheckContextTransferStatus, GEN:
	// CheckGenTransferStatus) with AtLeast over Scope.
	Check   bool
	AtLeast int
	Scope   CheckScope
	// Idle: the check is the idle path's (its collectives and reaps are
	// counted as idle-check figures).
	Idle bool
	// QueueShape, when > 0, is the length of the vector reduced over the
	// executor group before the check (only the queue-sized-collective
	// replay: a shape taken from the rank's local queue).
	QueueShape int
	// ReportFailures is how many rank-local failures to report through a
	// collective of this rank's own (only the local-error-collective
	// replay; 0 otherwise).
	ReportFailures int
	// Row names the row of DESIGN.md §6 (or the replay) that applied.
	Row string
}

func (a ProgressAction) String() string {
	if !a.Check {
		return fmt.Sprintf("no check (%s)", a.Row)
	}
	scope := ""
	if a.Scope == ExecutorScope {
		scope = " over the executor group"
	}
	return fmt.Sprintf("check at_least=%d%s idle=%t (%s)", a.AtLeast, scope, a.Idle, a.Row)
}

// DecideProgress is the transfer-progress policy of DESIGN.md §6 for both
// roles and every mode, with the replays as inputs:
//
//	CTX async, 1 rank              check, at_least 0, every iteration (no collective)
//	CTX async, >1 ranks            check, at_least 0, every iteration, on every rank
//	CTX sync, busy                 no check (sync reaps only when idle or at agreed points)
//	CTX sync, 1 rank, idle, held   check, at_least 0: reap (seed 001's fix)
//	CTX sync, 1 rank, idle, none   no check
//	CTX sync, >1 ranks, idle       no check: the guard
//	CTX sync, admission blocked    check, at_least 0 (agreed: a coordinated reap)
//	CTX sync, draining             check, at_least 0 (agreed: a coordinated drain)
//	CTX async, draining            no check (the progress point checked already)
//	GEN async                      check, at_least 0, every iteration, on every rank
//	GEN sync                       check when the scope holds sessions (agreed in the scope)
//
// Replays: unclamped-poll makes the idle CTX check wait for at_least 1
// (seed 000); no-idle-reap removes the single-rank sync reap and the
// coordinated reap (seed 001); unsafe-idle-reap has an idle multi-rank sync
// GEN rank with nothing of its own check over its executor group (the guard
// removed); local-error-collective reports each rank-local failure through
// a collective of the failing rank's own; blocking-outcomes makes every
// async CTX check wait for every send the rank holds (#15139).
func DecideProgress(in ProgressInput) ProgressAction {
	a := decideCheck(in)
	if in.Replays.On(LocalErrorCollective) && in.GroupRanks > 1 && in.Role == topology.Generation {
		a.ReportFailures = in.NewLocalFailures
	}
	return a
}

func decideCheck(in ProgressInput) ProgressAction {
	idle := !in.Busy
	if in.Role == topology.Generation {
		switch {
		case !in.Sync && in.Replays.On(QueueSizedCollective) && in.QueueLen == 0:
			return ProgressAction{Row: "replay queue-sized-collective: an empty local queue skips its collectives"}
		case !in.Sync && in.Replays.On(QueueSizedCollective):
			return ProgressAction{Check: true, Idle: idle, QueueShape: in.QueueLen, Row: "replay queue-sized-collective: a reduce shaped by the local queue, then the check"}
		case !in.Sync && in.SomeRankIdle && in.Replays.On(IdleMaxPoll):
			return ProgressAction{Check: true, AtLeast: 1, Idle: idle, Row: "replay idle-max-poll: a rank is idle, so every rank's check waits for at_least 1"}
		case !in.Sync:
			return ProgressAction{Check: true, Idle: idle, Row: "gen async: every iteration, on every rank"}
		case in.ScopeHolds:
			return ProgressAction{Check: true, Idle: idle, Row: "gen sync: the scope holds sessions"}
		case in.Replays.On(UnsafeIdleReap) && in.GroupRanks > 1 && !in.BusyLocally:
			return ProgressAction{Check: true, Scope: ExecutorScope, Idle: true, Row: "replay unsafe-idle-reap: idle rank checks over its executor group"}
		}
		return ProgressAction{Row: "gen sync: nothing held in the scope"}
	}
	noReap := in.Replays.On(NoIdleReap)
	switch {
	case in.Draining && !in.Sync:
		return ProgressAction{Row: "ctx async, draining: this iteration checked already"}
	case in.Draining && noReap:
		return ProgressAction{Row: "replay no-idle-reap: no coordinated drain"}
	case in.Draining:
		return ProgressAction{Check: true, Row: "ctx sync, draining: coordinated drain"}
	case !in.Sync && in.Sessions > 0 && in.Replays.On(BlockingOutcomes):
		return ProgressAction{Check: true, AtLeast: in.Sessions, Idle: idle, Row: "replay blocking-outcomes: ctx check waits for the outcome of every send held"}
	case !in.Sync && idle && in.Replays.On(UnclampedPoll):
		return ProgressAction{Check: true, AtLeast: 1, Idle: true, Row: "replay unclamped-poll: idle check waits for at_least 1"}
	case !in.Sync && in.GroupRanks <= 1:
		return ProgressAction{Check: true, Idle: idle, Row: "ctx async, single rank"}
	case !in.Sync:
		return ProgressAction{Check: true, Idle: idle, Row: "ctx async, multi-rank: every rank, every iteration"}
	case in.Busy:
		return ProgressAction{Row: "ctx sync, busy: no poll"}
	case in.GroupRanks <= 1 && in.SendsHeld && noReap:
		return ProgressAction{Row: "replay no-idle-reap: single-rank sync never reaps when idle"}
	case in.GroupRanks <= 1 && in.SendsHeld:
		return ProgressAction{Check: true, Idle: true, Row: "ctx sync, single rank, send in flight: reap"}
	case in.AdmissionBlocked && noReap:
		return ProgressAction{Row: "replay no-idle-reap: no coordinated reap"}
	case in.AdmissionBlocked:
		return ProgressAction{Check: true, Row: "ctx sync, admission blocked: coordinated reap"}
	case in.GroupRanks <= 1:
		return ProgressAction{Row: "ctx sync, single rank, nothing in flight"}
	}
	return ProgressAction{Row: "ctx sync, multi-rank: guard"}
}

// AdmissionInput is what the admission decision may read: the blocks each
// waiting request needs on this rank (FIFO order; 0 for requests this rank
// holds nothing of) and this rank's free blocks (both local), and the
// agreed group size and role.
type AdmissionInput struct {
	Role       topology.Role
	GroupRanks int
	Needs      []int
	Free       int
	Replays    ReplaySet
}

// AdmissionAction is what admission does this iteration.
type AdmissionAction struct {
	// LocalFit is the FIFO prefix of the waiting requests that fits this
	// rank's pool.
	LocalFit int
	// Agree: the group takes the minimum of every rank's LocalFit (an
	// allreduce entered by every rank), and admits that many.
	Agree bool
	// ReapFirst (replay local-admission-gate only): nothing fits here, so
	// this rank enters a status check instead of agreeing: a collective
	// chosen from a rank-local fact.
	ReapFirst bool
}

// DecideAdmission is the admission policy: every rank computes its local
// fit, and a multi-rank group agrees on the minimum, so no collective ever
// depends on one rank's free blocks. A single rank admits its local fit.
//
// With nothing waiting there is nothing to decide and no collective: the
// waiting list is agreed (intake is broadcast and admission agreed), so the
// skip is the same on every rank.
func DecideAdmission(in AdmissionInput) AdmissionAction {
	a := AdmissionAction{LocalFit: localFit(in.Needs, in.Free)}
	switch {
	case len(in.Needs) == 0, in.GroupRanks <= 1:
	case in.Replays.On(LocalAdmissionGate) && in.Role == topology.Context && a.LocalFit == 0:
		a.ReapFirst = true
	case in.Replays.On(LocalAdmissionGate) && in.Role == topology.Context:
		// The old gate admitted on its own count when something fit.
	default:
		a.Agree = true
	}
	return a
}

// scheduleCap is how many of the waiting requests (their DP indices and
// prompt tokens, in order) a CTX iteration may admit: the FIFO prefix in
// which no DP index gets more than maxBatch requests or, past its first,
// more than maxTokens prompt tokens (a first prompt longer than the budget
// runs alone; 0: no limit). Limits are per DP index, as a serving engine's
// are per attention-DP rank. Its inputs are agreed (the broadcast waiting
// list), so every rank of a group gets the same answer.
func scheduleCap(dps []int, tokens []int64, maxBatch, maxTokens int) int {
	if maxBatch <= 0 && maxTokens <= 0 {
		return len(tokens)
	}
	count, sum := map[int]int{}, map[int]int64{}
	for i, t := range tokens {
		d := dps[i]
		if maxBatch > 0 && count[d] >= maxBatch || maxTokens > 0 && count[d] > 0 && sum[d]+t > int64(maxTokens) {
			return i
		}
		count[d]++
		sum[d] += t
	}
	return len(tokens)
}

// stepPlan is one CTX step under chunked prefill (chunkPlan): the tokens
// each unfinished prompt prefills (Cont, 0 when its DP index's budget is
// spent), and the first chunk of each waiting request the step may admit
// (New: its length is how many; a prefix of them keeps the same chunks).
type stepPlan struct {
	Cont []int64
	New  []int64
}

// chunkPlan plans one CTX step under chunked prefill
// (Config.ChunkedPrefill): contDPs and contLeft are the unfinished prompts
// admitted in earlier steps (their DP indices and the tokens each has
// left), in admission order; dps and tokens the waiting requests', in
// order. The unfinished go first, each taking what is left of its DP
// index's maxTokens, up to its rest; then the waiting requests are
// admitted in order (a FIFO prefix, as scheduleCap's) while their DP index
// has budget left and, with maxBatch, fewer than maxBatch requests in the
// step, each taking up to what is left. Limits are per DP index; the
// inputs are agreed (the broadcast waiting list and the agreed admissions),
// so every rank of a group gets the same plan.
func chunkPlan(contDPs []int, contLeft []int64, dps []int, tokens []int64, maxBatch, maxTokens int) stepPlan {
	left, count := map[int]int64{}, map[int]int{}
	budget := func(d int) int64 {
		if v, ok := left[d]; ok {
			return v
		}
		return int64(maxTokens)
	}
	take := func(d int, want int64) int64 {
		n := min(want, budget(d))
		left[d] = budget(d) - n
		if n > 0 {
			count[d]++
		}
		return n
	}
	p := stepPlan{Cont: make([]int64, len(contLeft))}
	for i, t := range contLeft {
		p.Cont[i] = take(contDPs[i], t)
	}
	for i, t := range tokens {
		d := dps[i]
		if budget(d) <= 0 || maxBatch > 0 && count[d] >= maxBatch {
			break
		}
		p.New = append(p.New, take(d, t))
	}
	return p
}

// decodeCap marks which of the requests ready to decode (their DP
// indices, in order) a GEN step decodes: the first maxBatch of each DP
// index (0: all). The rest wait, their KV held, for a later step. Its
// inputs are agreed (the group's order and agreed receipts). It counts in
// count (reused; returned grown as needed): the DP indices seen, each
// followed by its count.
func decodeCap(dps []int, maxBatch int, in []bool, count []int) ([]bool, []int) {
	in = in[:0]
	count = count[:0]
	for _, d := range dps {
		i := 0
		for i < len(count) && count[i] != d {
			i += 2
		}
		if i == len(count) {
			count = append(count, d, 0)
		}
		ok := maxBatch <= 0 || count[i+1] < maxBatch
		if ok {
			count[i+1]++
		}
		in = append(in, ok)
	}
	return in, count
}

// localFit is how many of needs, taken in order, fit in free blocks.
func localFit(needs []int, free int) int {
	for i, n := range needs {
		if n > free {
			return i
		}
		free -= n
	}
	return len(needs)
}
