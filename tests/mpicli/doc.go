// Package mpicli holds the rankrun CLI's end-to-end tests under real
// mpirun (Open MPI), behind the build tag mpirun: make test-mpi runs them
// (go test -tags mpirun ./tests/mpicli). They build bin/rankrun-mpi and a
// binary without MPI, run jobs of 2 to 6 ranks, each bounded, and check
// the reports as JSON: a clean run equals the in-process run of the same
// flags; a wrong -np, a build without MPI, a bad flag and --backend local
// are refused once; a run error, an interrupt and kill -9 of a rank each
// end with one report naming the rank; a desync's dumps are analysed; a
// run whose requests fail prints its whole report; every multi-rank
// scenario (tests/multirank/testdata and the generated adp family) passes
// under mpirun at its own rank count; an exit fault ends the job within a
// bound, naming its rank; and a rank frozen with SIGSTOP is named within
// the collective timeout plus a slack (scenario_test.go and freeze_test.go
// list the environment variables that narrow or loosen them).
//
// Without Open MPI they skip, except under CI=true, where that fails.
package mpicli
