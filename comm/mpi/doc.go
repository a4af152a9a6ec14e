// Package mpi is rankrun's Open MPI backend: a thin cgo binding (build tag
// mpi, `#cgo pkg-config: ompi`) that implements comm.Comm with real MPI
// calls, plus the optional capabilities comm looks for: the stall inspector
// (InspectPeers asks peers for their flight records), a collective bound
// and World.Abort (MPI_Abort).
//
// Use:
//
//	w, err := mpi.Init(mpi.Config{Checked: true, Timeout: 30 * time.Second}) // Timeout bounds every collective
//	if err != nil { ... }        // built without -tags mpi: ErrNotBuilt
//	code := run(ctx, w.Comm())   // every rank, same collectives, same order
//	os.Exit(w.Finalize(code))    // max exit code over all ranks
//
// Without the mpi tag the package still builds: Init returns ErrNotBuilt
// (wrapping ErrUnderMPI as well when started by mpirun) and Available
// reports false. There is no stub world of size 1.
//
// How it works (one funnel under MPI_THREAD_SERIALIZED, polled collectives
// and their bound, the stall inspector, abort and finalize) is in DESIGN.md
// beside this file.
package mpi
