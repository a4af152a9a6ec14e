// Package local is the in-process world: N ranks as goroutines of one
// process, the embedded default backend of rankrun.
//
// Run starts the ranks and returns the first error any of them returned,
// cancelling the others (so a rank that fails never leaves its peers waiting
// in a collective). Collectives meet in a shared round per group: each rank
// deposits its contribution, the last to arrive combines them into a buffer
// owned by the group and wakes the others, who copy the result out. Nothing
// is allocated per collective once the buffers have grown. Point-to-point
// messages are matched in a mailbox per rank, in MPI's order (per sender
// FIFO, first posted receive first); a send completes when a receive has
// copied it (rendezvous), which is at least as strict as MPI.
//
// A rank that abandons a collective (its context ended) breaks the group:
// every rank waiting there, and every later collective on it, fails with an
// error wrapping comm.ErrBroken.
package local
