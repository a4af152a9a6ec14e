// Package scenario reads multi-rank regression scenarios from plain text
// files and runs them in-process, checked, each under a deadline.
//
// The file format is described in one place, scenario/FORMAT.md (keys,
// values, defaults, expectations, figures). In short: a scenario file is
// one "key: value" pair per line ("#" starts a comment; several pairs may
// share a line when separated by two or more spaces or a tab: one space
// joins them, and is refused with an error that says so). The run keys have the names and the syntax of the `rankrun run`
// flags (ctx, gen, transfer, requests, input, output, arrival, ctx-blocks,
// max-batch, max-tokens (0, no limit, unless given), chunked (true: chunked
// prefill, with max-tokens),
// stall-timeout, fault, replay, ...), so a scenario reads like the command
// line that reproduces it (Scenario.RunArgs prints that command line). The
// scenario keys are:
//
//	name:               what the scenario guards (required)
//	timeout:            deadline of one run (default 60s); a run still going
//	                    then is reported as a hang, naming the scenario
//	replay-under-test:  a replay this scenario proves caught: the scenario
//	                    runs twice, once as written (checked against expect:)
//	                    and once with the replay on (against expect-with-replay:)
//	expect:             an expected outcome or a bound (repeatable)
//	expect-with-replay: the same, for the run with replay-under-test on
//
// An expectation line is one of:
//
//	ok                                   the run completes
//	error ErrStalled [within 5s]         the run fails with this named error
//	error ErrDesync|ErrCollectiveTimeout either of several
//	message contains "never arrived"     the error (or report) names this text
//	FIGURE OP VALUE                      a bound on a report figure, for
//	                                     example ttft-p50 < 40ms, completed == 24,
//	                                     bytes-verified == bytes-moved
//
// An "ok" outcome also always requires: no report errors, zero leaked and
// zero pinned blocks at the end, every byte moved verified or, for a request
// that failed, discarded (bytes-verified + bytes-discarded == bytes-moved; unless a bound
// names bytes-verified itself, as a corruption scenario must), and every
// request accounted for (completed + failed + cancelled == requests).
//
// Run executes a scenario with executor.Run on launch.Local in checked mode; it never
// hangs: a run that has not returned by its deadline (plus a grace period) is
// a failure that names the scenario. Under mpirun, `rankrun-mpi scenario
// FILE` runs one variant per job: every rank runs RunRank, and world rank 0
// (or a rank that fails) judges the outcome with the same Verdict, so a
// scenario means the same on every backend. Generate makes whole families of
// scenarios (every attention-DP layout pair, for one).
package scenario
