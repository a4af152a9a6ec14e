// Package diag is the failure-dump format and the job's story told from
// it. Each rank of a failed run writes one dump (its flight recorder, the
// guard values that decided its collectives, its transfer sessions, its
// pool, its decisions, its stacks); Analyze reads every rank's dump and
// says which ranks left none, the first collective the ranks entered
// differently with each side's values, the ranks that never arrived where
// others wait and what they did instead, and the requests in flight.
// ReadPyTorch reads PyTorch's NCCL flight-recorder dumps (the pickle
// FlightRecorder writes, through a reader of its own that executes
// nothing; dump_json's JSON; the pickle re-saved as JSON) into the same
// form, so the same story is told of a PyTorch job.
//
// It knows nothing of communicators, executors or backends: a dump is
// data, written by executor and read here, and the story is a pure
// function of the dumps.
package diag
