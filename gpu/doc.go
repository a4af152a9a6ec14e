// Package gpu is the device side: the discovery of the NVIDIA GPUs on a
// node and the sizing of a rank's KV pool (package kvpool) from one.
//
// NVML is a small interface over the NVIDIA management library. NewNVML
// returns the real one (github.com/NVIDIA/go-nvml) in a binary built with
// the nvml tag (`make build` builds so), which never calls an NVML function
// unless nvml.Init succeeded; without the tag, so that the default build
// compiles no C and CGO_ENABLED=0 builds every package, NewNVML returns one
// whose Init fails with ErrNVML saying how to rebuild. Discover takes a
// snapshot of the node's devices (and its available host memory); BindRank
// picks a rank's device from its local rank; PlanPool sizes a pool from a
// fraction of the bound GPU's free memory, or from a configured host size
// when there is no GPU; PlanNode plans every local rank of a node under a
// layout, and warns of what the node as a whole cannot hold.
package gpu
