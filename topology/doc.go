// Package topology describes how one rankrun instance lays its ranks out and
// what each rank holds of a request's KV cache.
//
// It owns:
//
//   - Layout: the parallel sizes of one instance (TP, PP, CP, DP and the
//     attention-data-parallel switch), parsed from specs like "tp=2,pp=2" or
//     "dp=4,adp", and the bijection between instance ranks and coordinates
//     (rank = ((dp*PP + pp)*CP + cp)*TP + tp, TP fastest, DP slowest, so the
//     ranks of one DP index are contiguous).
//   - Model and Shard: the KV geometry of the served model and the slice of it
//     (layers, heads, blocks) that one rank holds, with its block size in bytes
//     and the byte offset of every (layer, K/V, head, token) inside a block.
//   - Group membership: TP, PP, CP and DP groups, the executor group and the
//     consensus scopes of DESIGN.md §4.
//   - Mapping: which CTX rank sends which fragment of a request's KV to which
//     GEN rank, such that every byte a GEN rank holds is sent exactly once.
//
// It is a leaf: it imports nothing from rankrun, does no I/O and knows
// nothing of time or transport. Every function is deterministic.
//
// Callers must validate a Layout (ParseLayout does, or call Validate) and
// check it against a Model (ValidateFor, or Map) before asking for shards or
// groups: the rank-indexed accessors panic on a rank outside the layout, like
// a slice index would.
package topology
