// Package mpi is rankrun's Open MPI backend: a thin cgo binding (build tag
// mpi, `#cgo pkg-config: ompi`) that implements comm.Comm with real MPI
// calls, plus the optional capabilities comm.Inspector (the stall
// inspector asks peers for their flight records) and comm.Aborter
// (MPI_Abort).
//
// Use:
//
//	w, err := mpi.Init(mpi.Config{Checked: true, Timeout: 30 * time.Second}) // Timeout bounds every collective
//	if err != nil { ... }        // built without -tags mpi: ErrNotBuilt
//	code := run(ctx, w.Comm())   // every rank, same collectives, same order
//	os.Exit(w.Finalize(code))    // max exit code over all ranks
//
// Without the mpi tag the package still builds: Init returns ErrNotBuilt
// (wrapping comm.ErrUnderMPI as well when started by mpirun) and Available
// reports false. There is no stub world of size 1.
//
// # Threading: one funnel, MPI_THREAD_SERIALIZED
//
// Every MPI call of the process goes through one mutex (engine.mu), and
// no call made under it blocks: collectives and point-to-point requests are
// non-blocking operations, and waiting is polling (MPI_Test, MPI_Testsome)
// that releases the mutex between polls. This is why:
//
//   - Blocking calls must honour their context and the collective bound. A
//     blocking MPI_Allreduce cannot be interrupted and cannot return an
//     error when a peer never comes; a polled operation can.
//   - Measured here (MPI-NOTES.md): MPI_THREAD_MULTIPLE with several
//     goroutines inside MPI at once was ~700x slower at np=4 oversubscribed
//     than at np=2. With one caller at a time Open MPI runs its fast,
//     lock-free paths. (Uncontended, MULTIPLE cost the C blocking allreduce
//     little: scripts/bench-mpi.sh measures it.) A blocking fast path with a
//     watchdog would need MULTIPLE (the watchdog and the stall inspector
//     call MPI while a thread blocks in it) and could only end the job at
//     the bound, never return the *comm.TimeoutError comm.Bounded promises.
//   - MPI_THREAD_FUNNELED would force every call onto one OS thread (a
//     dedicated goroutine with channel hand-offs: two context switches per
//     call). A mutex lets the calling goroutine make the call itself on
//     whatever thread it runs on, which MPI_THREAD_SERIALIZED allows.
//
// So Init asks for MPI_THREAD_SERIALIZED (Config.ThreadLevel may ask for
// MULTIPLE, for programs that call MPI directly elsewhere; the binding
// still funnels its own calls).
//
// # Direct collectives
//
// MPI's non-blocking collectives (libnbc in Open MPI 4.1) cost 2-3x the
// blocking ones even in C, so a binding that polls them cannot come near
// C's blocking calls. For groups of up to directMax ranks, Barrier,
// AllreduceInt64, AllgatherInt64s, Bcast and Split's barrier are instead
// one round of point-to-point messages on the communicator's control
// duplicate (the one the stall inspector uses, with their own tags): every
// rank sends its contribution to every other rank and receives theirs (a
// Bcast root sends to every rank), with MPI_Isend and MPI_Irecv completed
// by MPI_Testsome, then reduces or assembles locally.
// Measured here, that round costs about what the blocking collective costs,
// and the allgather pair (counts, then values) is one round instead of
// two. Posting and the first spin are one cgo call: a collective whose
// peers are there completes without returning to Go in between. Each
// message carries a header (the communicator's collective count, the kind,
// the shape: count and op, or how many values follow), so a rank whose
// peer entered another collective, or the same one with another shape,
// fails at once with an error wrapping comm.ErrDesync that names both, in
// unchecked mode too (a Bcast root only sends, so only its peers see it).
// Larger groups use MPI's non-blocking collectives.
//
// # Waiting
//
// A poll spins in C (MPI_Test or MPI_Testsome in a loop) for up to
// spinBudget (50 us; the clock is read only after the first 16 tests, so an
// operation that completes at once reads none), then returns to Go to check
// the context, the bound and whether the communicator was closed, and
// lets other goroutines run. Large transfers thus progress in C as in
// MPI_Wait, without a Go round trip per test. When the node's ranks
// outnumber its cores, the spin gives the core away between its tests
// (sched_yield), so a waiting rank does not keep it from the peer it
// waits for; Init turns Open MPI's own yield (mpi_yield_when_idle, in
// every progress call) off unless the user set it, because on a machine
// where an unrelated busy process shares the cores each such yield hands
// that process a whole time slice: five ranks on two cores beside two
// busy loops ran 10 requests in 43 s with it, 0.3 s without. The binding's
// own yield is timed: one that took over 1 ms (the core went to another
// process for a slice) turns yielding off for 100 ms, and waits meanwhile
// sleep between their polls (a sleeper is woken in time, a yielder waits
// for the slice). Otherwise only after sleepAfter (100 ms) does a wait
// sleep between polls, so a rank stalled in a collective stops burning a
// core while still answering the stall inspector. Init sets GOMAXPROCS from the cores this
// process may use divided by the ranks on its node, at least 2: with a
// single P, Go's sysmon retakes it from every poll that outlasts 20 us and
// then wakes every 20 us itself (Config.GOMAXPROCS, setProcs).
//
// # Memory
//
// MPI's handles, statuses and collective buffers live in C memory
// (malloc'd per communicator, grown and reused), so the hot path —
// AllreduceInt64 of one value, AllgatherInt64s into a reused
// comm.Gathered — does not allocate in unchecked mode (tested with
// testing.AllocsPerRun). Point-to-point buffers are the caller's Go memory,
// pinned with runtime.Pinner from Isend/Irecv until the request completes.
// Until then the engine also holds the request in its in-flight list, so a
// caller may drop a request it stopped waiting for (an error path): the
// buffer stays pinned and alive for MPI, and the responder releases it once
// MPI completes the request (a receive nothing ever matches stays held, as
// an abandoned collective does). Without the list, the next garbage
// collection would find the dropped request's Pinner and panic ("found
// leaking pinned pointer"), or free a buffer MPI still writes.
//
// # Abandoned collectives
//
// A collective that MPI has started cannot be withdrawn. When its context
// ends (or the communicator is closed, or a desync or MPI error ends it)
// the call returns the error and the communicator is broken: later
// collectives fail fast with comm.ErrBroken. The abandoned operation's C
// buffers are handed to the engine, which frees them only if MPI ever
// completes the operation (a broken communicator keeps its control
// duplicate for that: a request completing with an error on a freed
// communicator would reach MPI's fatal error handler). The
// caller is expected to report the error and end the job (comm.Aborter),
// as DESIGN.md §3 requires.
//
// # Timeouts (comm.Bounded)
//
// Every collective, checked or not, is bounded by Config.Timeout
// (comm.DefaultCollectiveTimeout when 0; children of Split inherit it).
// Past the bound the collective is abandoned as above and returns a
// *comm.TimeoutError: the group, this rank, the operation (Waiting.Kind,
// Waiting.Seq: the communicator's own count of collectives entered, and
// the caller's site) and the ranks that never arrived. Those come from the
// stall inspector: each peer's answer carries how many collectives it has
// entered on the communicator (a counter kept where collectives are posted,
// under the MPI mutex, so it costs the hot path nothing), and a peer below
// this collective's number, or one that does not answer within
// inspectBudget, is missing. The bound starts at the first poll that
// finds the collective unfinished, so a collective that completes at once
// reads no clock.
//
// Split has no non-blocking MPI form: it first runs a barrier (which
// honours ctx and the bound), then the blocking MPI_Comm_split and MPI_Comm_dup, which
// return promptly because every member has arrived. (A member whose ctx
// ends in the instant between the barrier completing and its poll seeing
// it would leave the others in MPI_Comm_split; that race is accepted.)
//
// # Stall inspection
//
// Each communicator has a control duplicate used by the stall inspector
// (and the direct collectives, on their own tags), with a receive for
// inspection requests always posted. A rank answers (with its
// comm.Recorder snapshot, in the length-prefixed encoding of codec.go)
// whenever it polls MPI and, every 5 ms, from a background goroutine that
// takes the MPI mutex briefly, so a rank busy with rank-local work still
// answers. InspectPeers sends a nonce to every peer and collects replies
// until its context ends; silent peers get PeerRecords.Err. Each answer also
// carries the peer's count of collectives entered on that communicator
// (PeerRecords.Entered) and whether its program has returned, that is, it
// is in Finalize (PeerRecords.Returned). Finalize agrees the exit code on
// a duplicate of the world of its own, so a rank that returns while its
// peers wait in a world collective never pairs with it.
//
// Child names from Split are the parent's name + "/s<n>c<color>", n
// counting the Splits made on the parent (from 0), as in comm/local.
package mpi
