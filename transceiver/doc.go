// Package transceiver moves KV-cache blocks from context (CTX, prefill) ranks
// to generation (GEN, decode) ranks and decides, rank-safely, when a transfer
// is over.
//
// A CTX rank holds one send session per request it must deliver, a GEN rank
// one receive session. The caller (the executor) owns the KV blocks: it
// allocates them before a session starts and releases them once the group
// agreed the transfer ended; a session only leases (pins) them while bytes
// may move. GEN leases its destination blocks, posts the
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
// ready-id and outcome consensus over the rank's consensus scope in one
// collective per hop (consensus.Gatherer.Agree: each rank's words carry
// the ids over on it with their state and quiesced flag, kept sorted as
// sessions end). Only agreed outcomes are applied: sessions end and
// their leases with them, on every rank of the scope together, and the
// caller frees the blocks.
//
// Files: transceiver.go (the type, New, Pump, Close), session.go (the
// session model and leases), send.go and recv.go (the data paths),
// cancel.go (the cancel protocol), control.go (the control channel),
// check.go (the status check), setup.go (consensus scopes), kvbytes.go,
// digest.go, internal/wire (the message codec, the package's own),
// pattern.go, buffers.go, state.go, config.go.
//
// A Transceiver is owned by one goroutine (the rank's executor loop); its
// methods are not safe for concurrent use.
package transceiver
