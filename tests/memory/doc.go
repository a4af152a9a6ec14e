// Package memory holds memory bounded by design against stated budgets,
// behind the build tag memory: make test-memory runs it (go test -tags
// memory ./tests/memory). What a command holds must not grow with the
// length of its run: each case runs bin/rankrun (make build's, with NVML)
// as a process of its own, reads the peak RSS its report gives
// (wall_peak_rss_bytes, from getrusage) and fails past its budget, which
// is ~3x what it measured on a 2-core, 23.5 GiB machine:
//
//	case                                               measured   budget
//	run, 50,000 requests, --trace and --requests-out      38 MB   128 MiB
//	sim, 2048 ranks (dp=1024 each side), 4096 requests   610 MB   1.5 GiB
//
// The first held every trace event and record until the end before they
// were streamed: 3.2 GB at 50,000 requests, 13.0 GB at 200,000 (the trace
// file is ~1 GB). Both of its files are checked whole: every request
// once, and the trace closed with one track name per rank.
package memory
