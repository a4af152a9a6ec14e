// Package transceiver moves KV-cache blocks from context (CTX, prefill) ranks
// to generation (GEN, decode) ranks and decides, rank-safely, when a transfer
// is over.
//
// A CTX rank holds one send session per request it must deliver, a GEN rank
// one receive session. GEN allocates its destination blocks, posts the
// receives for every fragment it expects (topology.Mapping says which CTX
// rank sends which layers and heads) and then sends its request info to
// those CTX ranks. After prefill the CTX rank packs its fragments from its
// leased blocks and sends them; the GEN rank checks the header, verifies
// every byte against the deterministic KV pattern (Pattern), unpacks into
// its blocks and acknowledges. A CTX session completes only on the
// acknowledgement, never merely when the send buffer is free.
//
// Deciding that transfers are over is a status check in three phases
// (DESIGN.md §4): a bounded, rank-local poll (clamped to the sessions held,
// returning at once when that is zero, woken by completion events), then
// ready-id consensus and outcome consensus over the rank's consensus scope
// (package consensus). Only agreed outcomes are applied: leases end, blocks
// are freed, requests terminate on every rank of the group together.
//
// A Transceiver is owned by one goroutine (the rank's executor loop); its
// methods are not safe for concurrent use.
package transceiver
