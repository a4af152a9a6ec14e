// Package executor is the per-rank loop of a disaggregated run: every CTX
// (prefill) and GEN (decode) rank iterates intake, admission, compute,
// transfer progress and the idle wait, and the ranks of one executor group
// make the same collectives in the same order.
//
// Files, one idea each:
//
//	run.go       RunRank / Run on a World: communicators, the rank's loop, reports
//	base.go      the state both roles share; the status check as decided; termination
//	ctx.go       the CTX loop: prefill, sends started
//	gen.go       the GEN loop: receives started, outcomes shared, decode
//	intake.go    intake (broadcast) and admission (agreed) with block allocation
//	policy.go    the pure decisions: DecideProgress, DecideAdmission
//	outcomes.go  the group's tally of transfer outcomes (attention-DP)
//	idle.go      idle waits (leader, members) and bounded waits on peers
//	control.go   the control channel: route, handoff, done records
//	router.go    the workload's client on world rank 0
//	audit.go     checked mode's audit that agreed decisions are agreed
//	messages.go  the records ranks exchange
//	compute.go   the Compute hook a step sleeps through (the cost model's seat)
//	stepmemo.go  one step price per executor group in a process
//	dispatch.go  expert-parallel dispatch under attention-DP
//	routememo.go one routing of an EP group's tokens per process
//	guards.go    the rank-local values that decide the next collective
//	dump.go      a rank's failure dump (DESIGN.md §12)
//	collect.go   rank reports gathered on world rank 0 (internal/pieces)
//	runerror.go  a run's named error and its partial report (Partial)
//	sketch.go    the report's distributions (DDSketch)
//	config.go, workload.go, fault.go, replay.go, replay_needs.go, metrics.go,
//	report.go, tracereport.go (a replayed production trace in the report)
//
// What may differ between ranks and what may not (DESIGN.md §1, §6):
//
//   - Intake is a broadcast from the group's rank 0, so every rank schedules
//     the same batch.
//   - Admission is agreed (DecideAdmission): each rank counts how many
//     waiting requests fit its own pool, and the group takes the minimum (an
//     allreduce), so no collective ever depends on one rank's free blocks.
//   - Transfer progress (DecideProgress) is a pure function of agreed values
//     and configuration for every choice that enters a collective; the
//     rank-local inputs only choose actions that enter none. Single-rank sync
//     CTX reaps while idle (seed 001's fix); multi-rank sync never enters an
//     idle collective (the guard).
//   - Under attention-DP a request's transfer is decided for the group only
//     when every rank that holds it has reported its scope's verdict, through
//     one allgather over the group; busy and idle follow from that alone.
//     Checked mode audits busy every iteration.
//   - An idle rank waits on events (arrivals, messages, transfer ends) with a
//     deadline, never on a fixed sleep: new work is picked up in microseconds
//     (seed 000's fix). A wait on a peer is bounded by the collective timeout
//     and names the peer.
//
// The executor owns every KV block: it allocates on admission and releases
// when the group agreed the transfer ended (CTX) or the request finished
// (GEN); the transceiver leases blocks while bytes move. Time comes from
// Config.Clock.
//
// The named replays (Replays) bring old behaviours back on purpose, and the
// faults (Fault) inject rank-local failures, so that regression tests can
// prove they catch them. Run runs a whole job in one process on a World the
// caller picks (launch.Local, launch.Sim: executor imports no backend);
// RunRank is one rank of a job on any comm.Comm (mpirun uses it through
// cmd/rankrun; the module's internal/jobreport still makes one report of
// a job that failed, from what its ranks send). Both return a Report with
// stable JSON field names.
package executor
