// Package consensus holds phases 2 and 3 of a status check (DESIGN.md §4):
// deciding, from every rank's view, which requests are ready and what
// happened to them.
//
// It owns two things:
//
//   - Pure functions over per-rank views: Ready (an id is ready only when
//     every rank reports it) and Decide (cancelled = union, failed = union
//     minus cancelled, completed = intersection minus both, quiesced =
//     intersection; precedence cancelled > failed > completed). They take no
//     clock, goroutine or communicator and are tested as data and against a
//     brute-force reference.
//   - One collective step, Gatherer.Agree, that gathers those views through a
//     comm.Comm, hop by hop over a sync group (CTX: its TP group, then its PP
//     group; GEN: one group), and folds them with the same algebra, so that
//     after the last hop every rank of the combined group holds what Ready
//     and then Decide would compute from all of their views at once. Ready
//     ids and their outcome travel together: each rank sends one word per
//     terminal session (id, local state, quiesced), so a status check is one
//     collective per hop, not two (TestAgreeEqualsTwoPhase proves the two
//     forms decide the same over random per-rank views). The fold is a
//     galloping merge of sorted words, linear at worst, allocation-free in
//     steady state.
//
// It knows nothing of sessions, transfers or the executor.
//
// Callers must:
//
//   - Call Gatherer.Agree unconditionally on every
//     rank of the scope, the same number of times and in the same order, or
//     only on a fact that is identical on every rank (configuration, a
//     sticky flag that flips on all ranks together, a value that was itself
//     agreed). It is a collective; calling it from a rank-local branch
//     breaks the one rule and hangs or desyncs the group.
//   - Pass the same scope (the same communicators, in the same order) on
//     every rank of the combined group, and make each later hop's group
//     connect the earlier hops' groups (one member of every TP group in each
//     PP group), so that the result is the same on every rank.
//   - Use one Gatherer per rank and scope, from one goroutine. Results alias
//     the Gatherer's buffers and stay valid until its next call; copy them
//     (slices.Clone) to keep them longer.
//   - Treat a gather error as fatal for the scope: the communicator is
//     broken and later collectives on it fail.
//
// Ready and Decide take lists that need not be sorted and may hold
// duplicates; results are sorted ascending without duplicates. Agree takes
// words strictly ascending by id (ids up to MaxID).
package consensus
