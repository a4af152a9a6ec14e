// Package multirank holds the multi-rank regression suite: scenario files
// under testdata/ (run by TestScenarios, format in package scenario), a
// seeded layout x transfer x fault matrix (TestMatrix; -args -soak runs all
// of it with several seeds) and, under real mpirun, tests/mpicli's
// TestMpirunScenarios (go test -tags mpirun ./tests/mpicli).
package multirank
