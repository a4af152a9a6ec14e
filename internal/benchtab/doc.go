// Package benchtab is rankrun bench's table: every benchmark figure beside
// its reference, as a ratio, with the goal it has. It owns the table's
// rows and their order, reading what scripts/bench.sh measured (go test
// -bench outputs, the MPI benchmarks' JSON, mpirun reports) from the raw
// folder, the figures it measures itself (in-process executor runs; the
// simulation speed, each a process of this binary's `run --backend sim`,
// and the floor its bytes set), and the outputs: the terminal table, the
// JSON and the generated section of BENCHMARKS.md.
//
// It does not know the command line (the flags, their checks and their
// defaults are cmd/rankrun's), nor the runs in simulation whose rows the
// caller adds through a Source (the perf-regression cases, the seeds'
// tables), nor how scripts/bench.sh produced the raw files: it reads them
// by name and says which are missing.
//
//	err := benchtab.Run(benchtab.Options{Raw: "out/raw", JSON: "out/bench.json", Command: "make bench",
//		HandoverRequests: 400, SeedRequests: 6, ControlPlaneRequests: 3000,
//		Sources: []benchtab.Source{...}, SimSpeedReps: 3}, os.Stdout, os.Stderr)
//
// Files:
//
//	run.go       Run and its Options: the parts in order, then the outputs
//	row.go       Row, one figure beside its reference; RatioRow judges its goal
//	table.go     the table, what is missing, the terminal form
//	markdown.go  the generated section of BENCHMARKS.md
//	machine.go   the machine the outputs record
//	raw.go       reading scripts/bench.sh's raw files
//	rawrows.go   the rows read from them
//	executor.go  the in-process executor figures
//	simspeed.go  the simulation speed, a process of this binary each
//	simfloor.go  the floor a simulation's memory and bytes set
package benchtab
