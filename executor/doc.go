// Package executor is the per-rank loop of a disaggregated run: every CTX
// (prefill) and GEN (decode) rank iterates intake, admission, compute,
// transfer progress and the idle policy, and the ranks of one executor group
// make the same collectives in the same order.
//
// What may differ between ranks and what may not (DESIGN.md §1, §6):
//
//   - Intake is a broadcast from the group's rank 0, so every rank schedules
//     the same batch.
//   - Admission is agreed: each rank counts how many waiting requests fit its
//     own pool, and the group takes the minimum (an allreduce), so no
//     collective ever depends on one rank's free blocks.
//   - The idle decision (DecideIdle) is a pure function of configuration and
//     of whether the iteration was busy, which is agreed. Single-rank sync
//     CTX reaps while idle (seed 001's fix); multi-rank sync never enters an
//     idle collective (the guard).
//   - An idle rank waits on events (arrivals, messages, transfer ends) with a
//     deadline, never on a fixed sleep: new work is picked up in microseconds
//     (seed 000's fix).
//
// The named replays (Replays) bring old behaviours back on purpose, and the
// faults (Fault) inject rank-local failures, so that regression tests can
// prove they catch them. RunLocal runs a whole job in one process; RunRank is
// one rank of a job on any comm.Comm (mpirun uses it through cmd/rankrun).
// Both return a Report with stable JSON field names.
package executor
