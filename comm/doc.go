// Package comm defines the communicator every rankrun rank talks through.
//
// A Comm is a group of ranks that make collective calls (Barrier,
// AllreduceInt64, AllgatherInt64s, Bcast, Split) in the same order, and
// exchange tagged byte messages point to point (Isend, Irecv). Three
// backends implement it: comm/local (goroutine ranks in one process, the
// default), comm/sim (the same in virtual time, under a seeded scheduler)
// and comm/mpi (Open MPI through cgo, build tag mpi). All three pass the
// conformance suite in comm/commtest.
//
// The one rule of rankrun is that collectives may not diverge between the
// ranks of a group. Checked mode (NewChecked) makes a break of that rule
// detectable: every checked collective is one AllgatherInt64s of the backend
// whose contribution starts with a fixed-size stamp (sequence number, kind,
// call path, argument shape), followed by the payload (an allreduce reduces
// the gathered values in rank order, a broadcast packs the root's bytes). So
// ranks that entered different collectives still pair the same underlying
// operation, compare stamps, and each returns an error wrapping ErrDesync
// that names both call paths, at the cost of one collective, not two. A
// collective
// that does not complete within its deadline returns an error wrapping
// ErrCollectiveTimeout that names the ranks that never arrived, with the last
// operations of every rank taken from their flight recorders (flight.Recorder).
//
// Point to point, checked mode promises less, because messages may
// legitimately differ between ranks (each rank sends what it has): it
// records every Isend and Irecv in the flight recorder (peer, tag, call
// path, whether it completed), so a timeout or the stall inspector shows
// what each rank last posted and what never matched; a receive whose
// buffer is smaller than the message fails with an error wrapping
// ErrTruncated instead of dropping bytes; and waits on a peer are bounded
// by the caller (the executor waits at most the collective timeout and
// then names the peer). It does not check that a send and its receive
// were posted by matching code paths: the tag and the length are all the
// backends match on (the transceiver's own wire header, checked by the
// receiver, names a fragment that is not the one expected). Ordering is MPI's: messages between one pair on one
// communicator and tag do not overtake each other (every backend, the
// simulation's jitter included).
//
// Callers must: pass a context to every blocking call (its cancellation or
// deadline ends the call with ctx.Err() wrapped); never reuse a buffer given
// to Isend or Irecv before its Request completes; treat a communicator whose
// collective failed as broken (every later collective fails fast).
//
// What comm does not hold: the flight recorder and its guard values are
// package comm/flight (PropsOf(c).Recorder finds a checked communicator's);
// what only backends share (a rank's name in an error, the point-to-point
// argument check, the pure round of local and sim) is under
// comm/internal; a backend's optional capabilities (its clock, a
// collective bound, completion events, lent or vectored buffers) are
// asked for through PropsOf, and its stall inspector through Unreachable,
// both of which look through checked mode.
package comm
