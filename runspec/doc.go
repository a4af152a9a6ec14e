// Package runspec is the description of one rankrun run, and the one path
// from it to the executor's configuration: the layouts, the workload, the
// model and hardware, the scheduler, the faults and replays, and the
// backend with its simulation. It registers the run's flags on a flag set,
// takes the same fields set in Go (a scenario file's keys, a perf case, a
// sweep cell), checks every value once with an error that names its flag
// (Error), and yields executor.Config and the simulation's sim.Config.
//
// It sizes the KV pools from a model and its hardware and picks the
// simulation's KV sample; Simulate runs a configuration in virtual time.
// It does not print a report, handle signals or know the commands that use
// it; under mpirun it only resolves --backend auto to mpi (the run is the
// caller's).
package runspec
