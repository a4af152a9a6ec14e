// Package sim is rankrun's simulation backend: N ranks in one process,
// exactly one running at a time, chosen by a seeded scheduler at every point
// where a rank blocks or yields (a collective's arrival and completion, a
// point-to-point post or wait, a timed wait), in virtual time.
//
// Virtual time moves only when every rank is blocked, straight to the next
// event: a deadline, a message's arrival, a collective's modelled
// completion. A one-second poll costs one second of virtual time and
// microseconds of wall time. Messages and collectives take the time the link
// model (Fabric: latency + bytes/bandwidth per link class, collectives by
// their usual algorithms) gives them; real bytes still move and are still
// verified, and moving them costs no virtual time. The seed is the only
// source of nondeterminism: the same seed and configuration give the same
// run, whatever else the machine is doing.
//
// When every rank waits and only deadlines that end waits in failure remain
// (collective timeouts, the run's deadline), nothing can ever move: Run
// reports a *DeadlockError naming every rank and what it waits on, at once.
//
// The world passes the conformance suite of package commtest (collectives,
// point-to-point in MPI's order, checked mode, timeouts), so the runtime's
// cores run on it unchanged, given each rank's clock: RankFunc receives it.
//
// Callers must: block only through the communicator, the clock and its
// waiters (a wait on any other channel would stop the whole world); use a
// rank's clock and communicators from that rank's goroutine only; start no
// goroutines that use them.
package sim
