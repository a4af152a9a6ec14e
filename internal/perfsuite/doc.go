// Package perfsuite is rankrun's perf-regression suite: a standard set of
// runs in simulation (Cases), whose figures (all virtual time, so exact and
// the same on any host of one architecture; the cost model's floats may
// round apart on another) are committed in File. make test-perf fails when
// a figure moves (cmd/rankrun's TestPerfFigures); make perf-update
// rewrites the file, and its diff is the review. rankrun bench prints the
// same figures beside the committed ones (Committed.Rows): what got faster
// or slower.
//
// It runs each case through runspec, as the command line would. It does
// not know the command line's output, nor where the binary's built-in copy
// of the file comes from (the caller passes it).
package perfsuite
