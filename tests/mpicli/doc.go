// Package mpicli holds the rankrun CLI's end-to-end tests under real
// mpirun (Open MPI), behind the build tag mpirun: make test-mpi runs them
// (go test -tags mpirun ./tests/mpicli). They build bin/rankrun-mpi and a
// binary without MPI, run jobs of 2 to 6 ranks, each bounded, and check
// the reports as JSON: a clean run equals the in-process run of the same
// flags; a wrong -np, a build without MPI, a bad flag and --backend local
// are refused once; a run error, an interrupt and kill -9 of a rank each
// end with one report naming the rank; a desync's dumps are analysed; and
// a run whose requests fail prints its whole report.
//
// Without Open MPI they skip, except under CI=true, where that fails.
package mpicli
