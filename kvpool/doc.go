// Package kvpool owns a rank's KV block pool: pure Go, with no device
// library behind it (package gpu lists the node's GPUs and sizes a pool
// from one).
//
// Pool is a fixed set of equal-size blocks backed by real bytes (one
// contiguous buffer, from an Arena off the Go heap where the platform
// allows). It works like a semaphore: Allocate waits (woken by releases,
// FIFO) until a request's blocks fit or its context ends, leaving the pool
// unchanged when it gives up; TryAllocate never waits. A request's blocks
// can be pinned by leases (a send session holds one while a write may be
// in flight); Release refuses while any lease is open. Misuse (releasing
// twice, ending an unknown lease) returns a loud error naming the request.
// CheckInvariants verifies the bookkeeping; tests call it after every step.
//
// The package knows nothing of transfers: callers (the transceiver) decide
// when to lease and release.
package kvpool
