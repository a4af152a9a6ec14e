// Package gpu owns a rank's KV block pool and the discovery of the NVIDIA
// GPUs on its node.
//
// Pool is a fixed set of equal-size blocks backed by real bytes (one
// contiguous buffer). It works like a semaphore: Allocate waits (woken by
// releases, FIFO) until a request's blocks fit or its context ends, leaving
// the pool unchanged when it gives up; TryAllocate never waits. A request's
// blocks can be pinned by leases (a send session holds one while a write may
// be in flight); Release refuses while any lease is open. Misuse (releasing
// twice, ending an unknown lease) returns a loud error naming the request.
// CheckInvariants verifies the bookkeeping; tests call it after every step.
//
// NVML is a small interface over the NVIDIA management library; NewNVML
// returns the real one (github.com/NVIDIA/go-nvml), which never calls an NVML
// function unless nvml.Init succeeded. Discover takes a snapshot of the
// node's devices (and its available host memory); BindRank picks a rank's
// device from its local rank; PlanPool sizes a pool from a fraction of the
// bound GPU's free memory, or from a configured host size when there is no
// GPU.
//
// The package knows nothing of transfers: callers (the transceiver) decide
// when to lease and release.
package gpu
