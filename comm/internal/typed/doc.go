// Package typed is the typed collectives' shared core, for comm and its
// backends only: the element types (Datatype), the reductions (ReduceOp,
// which comm exports as comm.ReduceOp, and their reference arithmetic,
// ReduceInto), the description of one typed collective a backend runs (Op:
// its arguments' check and the shape checked mode stamps), and the counts
// that must pair up across ranks (MismatchError). A program calls comm's
// generic functions (comm.Allreduce[float32], ...), which build an Op;
// it never names this package.
package typed
