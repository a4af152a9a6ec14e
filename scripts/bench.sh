#!/usr/bin/env bash
# make bench: every benchmark next to its reference, in one invocation.
# Runs, one after the other (never two at once: the MPI ranks busy-poll):
#   1. scripts/bench-mpi.sh: Go MPI binding vs the C reference, np=2 and 4;
#   2. go test -bench: comm/local (world vs sync.Cond), transceiver
#      (consensus round vs bare allgather, check scaling, KV transfer vs
#      p2p and memmove, breakdown + CPU profile), costmodel (a finite
#      run's closed form vs every step), executor (control plane);
#   3. mpirun -np 2 bin/rankrun-mpi run --json: idle handover, clean and
#      with the unclamped-poll replay;
#   4. bin/rankrun bench: the in-process executor figures, then the table
#      (stdout), out/bench.json and BENCHMARKS.md.
# Raw outputs stay in out/raw/. Knobs: REPS, N_SMALL, VSC_CHUNKS (bench-mpi.sh), BENCHTIME_SCALE.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
raw=out/raw
rm -rf "$raw"
mkdir -p "$raw"
start=$(date +%s)
step() { echo "== bench: $* ($(($(date +%s) - start)) s)" >&2; }

scripts/ensure-mpi.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun --version 2>/dev/null | head -1 >"$raw/ompi-version.txt" || true

step "build"
$GO build -tags nvml -o bin/rankrun ./cmd/rankrun # bin/rankrun is make build's, with NVML
$GO build -tags mpi -o bin/rankrun-mpi ./cmd/rankrun

step "1. MPI collectives vs C (scripts/bench-mpi.sh)"
REPS=${REPS:-3} scripts/bench-mpi.sh
cp out/bench-mpi.json "$raw/bench-mpi.json"
cp out/bench-mpi-status.json "$raw/bench-mpi-status.json"
cp out/bench-mpi-xfer.json "$raw/bench-mpi-xfer.json"

# gobench PKG OUT ARGS...: go test -bench, its output kept for rankrun bench.
gobench() {
	local pkg=$1 out=$2
	shift 2
	set -o pipefail
	$GO test -run '^$' -count=1 -benchmem "$@" "$pkg" | tee "$raw/$out"
}
step "1. in-process collectives (comm/local)"
gobench ./comm/local/ local.txt -bench . -benchtime 200000x
step "2, 3, 6. transceiver: consensus round, transfer, scaling"
# The consensus rows are ratios of separate benchmarks (check, bare,
# checked): 10000 calls each (tens of ms) so one scheduling hiccup does
# not decide a ratio; 1000 calls swung them 0.7-3.5x.
gobench ./transceiver/ transceiver.txt -bench 'ConsensusRound' -benchtime 10000x
gobench ./transceiver/ transceiver-scaling.txt -bench 'CheckScaling' -benchtime 1000x
gobench ./transceiver/ transceiver-xfer.txt -bench 'Transfer/frag=1MiB|TransferParts' -benchtime 200x
gobench ./transceiver/ transceiver-xfer64.txt -bench 'Transfer/frag=64MiB' -benchtime 20x \
	-cpuprofile "$raw/transfer64.pprof" -o "$raw/transceiver.test"
cat "$raw/transceiver-scaling.txt" "$raw/transceiver-xfer.txt" "$raw/transceiver-xfer64.txt" >>"$raw/transceiver.txt"
$GO tool pprof -top -nodecount=15 "$raw/transceiver.test" "$raw/transfer64.pprof" 2>/dev/null |
	sed -n '/^Showing\|flat%/,$p' >"$raw/transfer-profile.txt" || true
step "KV block pool (kvpool)"
gobench ./kvpool/ kvpool.txt -bench 'AllocateRelease32|AllocateCtxRelease32|LeaseEndLease|ReferenceFreeList32' -benchtime 200000x
step "cost model: a published cell's finite run, closed form vs every step priced"
gobench ./costmodel/ costmodel.txt -bench 'BenchmarkRun' -benchtime 5x
step "6. executor control plane (go test)"
gobench ./executor/ executor.txt -bench ControlPlane -benchtime 2000x

step "4. idle handover under mpirun -np 2"
mpi() { timeout --kill-after=10 300 mpirun --oversubscribe --bind-to none "$@"; }
mpi -np 2 bin/rankrun-mpi run --ctx tp=1 --gen tp=1 --requests 200 --arrival closed=1 --input 16 --output 1 --decode-per-step 5ms \
	--tokens-per-block 8 --head-dim 16 --layers 4 --sender-wait-slice 200ms --json >"$raw/mpi-handover.json"
mpi -np 2 bin/rankrun-mpi run --ctx tp=1 --gen tp=1 --requests 10 --arrival closed=1 --input 16 --output 1 \
	--tokens-per-block 8 --head-dim 16 --layers 4 --decode-per-step 5ms --sender-wait-slice 200ms \
	--replay unclamped-poll --json >"$raw/mpi-handover-unclamped.json"

step "4, 5, 6. executor figures and the table"
cmd="make bench"
bin/rankrun bench --raw "$raw" --json out/bench.json --md BENCHMARKS.md --command "$cmd"
step "done: out/bench.json, BENCHMARKS.md"
