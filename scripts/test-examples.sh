#!/usr/bin/env bash
# Runs every program under examples/ the three ways its README promises:
#
#  1. `go run` in-process (goroutine ranks), and again with
#     RANKRUN_BACKEND=sim (the same binary, simulated ranks in virtual time);
#  2. its test, in simulation under the schedule explorer (`go test`);
#  3. built with -tags mpi, under `mpirun -np 4` (and `-np 3` refused,
#     in one line);
#  4. a user's program with a fault on one rank (launch/internal/faulty:
#     a panic, a receive no peer matches) under `mpirun -np 4`: named in
#     one line, the job ended; a rank that returns while its peers wait
#     in a barrier (np 4 and 2): named as returned by the ranks that wait,
#     never as a desync; a rank that drops a collective's timeout and
#     returns: its Finalize ends the job.
#
# Then the explorer's promise on seedpoll, end to end: with the seed's bug
# (-unclamped) the test fails, naming the symptom and printing a replay
# line; that line, run as printed, fails the same way; with the clamp the
# same replay passes.
#
# Every run is bounded by `timeout`. Without Open MPI (and no way to
# install it) step 3 is skipped with a message, except under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
T=${EXAMPLE_TIMEOUT:-120}
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
say() { echo "test-examples: $*"; }
die() {
	echo "test-examples: FAIL: $*" >&2
	exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
examples=()
for d in examples/*/; do
	[ -f "$d/main.go" ] && examples+=("$(basename "$d")")
done
[ ${#examples[@]} -gt 0 ] || die "no example under examples/"

for e in "${examples[@]}"; do
	for backend in local sim; do
		say "go run ./examples/$e (RANKRUN_BACKEND=$backend)"
		RANKRUN_BACKEND=$backend timeout "$T" $GO run "./examples/$e" >"$tmp/out" 2>&1 ||
			{ cat "$tmp/out" >&2; die "go run ./examples/$e under $backend"; }
		sed 's/^/  /' "$tmp/out"
	done
done
say "go test ./examples/... (the explorer, in simulation)"
timeout "$T" $GO test -count=1 ./examples/...

# The replay line seedpoll's test prints reproduces the failure it found.
say "seedpoll with the seed's bug: the explorer must fail it and print a replay line"
if timeout "$T" $GO test -count=1 -run '^TestSeedPollUnderEverySchedule$' ./examples/seedpoll -unclamped >"$tmp/bug" 2>&1; then
	cat "$tmp/bug" >&2
	die "the explorer passed seedpoll without the clamp"
fi
grep -q 'slept out its whole 100ms interval (seed 000)' "$tmp/bug" || { cat "$tmp/bug" >&2; die "the failure does not name seed 000's symptom"; }
replay=$(sed -n 's/^ *replay: //p' "$tmp/bug")
[ -n "$replay" ] || { cat "$tmp/bug" >&2; die "no replay line"; }
case $replay in
"go test "*) ;;
*) die "the replay line is not a go test command: $replay" ;;
esac
say "replaying: $replay"
if eval "timeout $T $replay -count=1" >"$tmp/again" 2>&1; then
	cat "$tmp/again" >&2
	die "the replay line passed: it does not reproduce the failure"
fi
want=$(grep -o 'schedule seed [0-9]* ([^)]*): .*' "$tmp/bug" | head -1)
grep -qF "$want" "$tmp/again" || { cat "$tmp/bug" "$tmp/again" >&2; die "the replay failed otherwise than the search"; }
fixed=${replay% -unclamped}
say "the same schedule with the clamp: $fixed"
eval "timeout $T $fixed -count=1" >"$tmp/fixed" 2>&1 || { cat "$tmp/fixed" >&2; die "the clamped program fails the replayed schedule"; }

# shellcheck source=lib-mpi.sh
. scripts/lib-mpi.sh
mpi_setup test-examples
for e in "${examples[@]}"; do
	$GO build -tags mpi -o "$tmp/$e" "./examples/$e"
	say "mpirun -np 4 $e (built with -tags mpi)"
	timeout --kill-after=10 "$T" mpirun --oversubscribe --bind-to none -np 4 "$tmp/$e" >"$tmp/out" 2>&1 ||
		{ cat "$tmp/out" >&2; die "mpirun -np 4 $e"; }
	sed 's/^/  /' "$tmp/out"
done
# A world of the wrong size is refused, in one line from one rank.
say "mpirun -np 3 ringallreduce (needs 4): refused, said once"
if timeout --kill-after=10 "$T" mpirun --oversubscribe --bind-to none -np 3 "$tmp/ringallreduce" >"$tmp/out" 2>&1; then
	cat "$tmp/out" >&2
	die "ringallreduce ran on 3 ranks"
fi
n=$(grep -c 'needs exactly 4 (start it with mpirun -np 4)' "$tmp/out" || true)
[ "$n" = 1 ] || { cat "$tmp/out" >&2; die "the size mismatch was said $n times, want once"; }

# A user's program with a fault on one rank (launch/internal/faulty):
# under mpirun a panic, and a receive no peer matches, each come back as
# one line naming the world rank, and end the job (never a raw panic, never
# a hang). On world rank 0, a middle rank and the last.
$GO build -tags mpi -o "$tmp/faulty" ./launch/internal/faulty
# faulty FAULT RANK NP: run it under mpirun, output in $tmp/out; it must fail.
faulty() {
	if FAULT=$1 FAULT_RANK=$2 timeout --kill-after=10 "$T" mpirun --oversubscribe --bind-to none -np "$3" -x FAULT -x FAULT_RANK \
		"$tmp/faulty" >"$tmp/out" 2>&1; then
		cat "$tmp/out" >&2
		die "faulty ($1 on world rank $2, np $3) exited 0"
	fi
}
for fault in panic unmatched; do
	for r in 0 2 3; do
		case $fault in
		panic) want="world rank $r: panic: boom on rank $r" ;;
		unmatched) want="world rank $r: comm: point-to-point wait timeout on group \"world\" after 2s: rank $r waited in a receive from rank $(((r + 1) % 4)) tag 99 that no peer matched" ;;
		esac
		say "mpirun -np 4 faulty: $fault on world rank $r: named once, the job ends"
		faulty "$fault" "$r" 4
		n=$(grep -cF "aborts the MPI job from group \"world\" with code 1: $want" "$tmp/out" || true)
		[ "$n" = 1 ] || { cat "$tmp/out" >&2; die "faulty ($fault on rank $r): the failure was named $n times, want once"; }
	done
done
# A rank that returns while its peers wait in a barrier: the ranks that
# wait name it as returned (each that prints before the job ends), at once
# (their bound is an hour, and no bound ran out: the returning rank said
# so before it finalized), and its own Finalize never pairs with their
# barrier (no desync).
for np_r in 4:0 4:2 4:3 2:1; do
	np=${np_r%:*} r=${np_r#*:}
	say "mpirun -np $np faulty: world rank $r returns early: named as returned, no desync"
	faulty early "$r" "$np"
	n=$(grep -cF "ranks [$r] never arrived; rank $r has returned from its program: it enters nothing more" "$tmp/out" || true)
	[ "$n" -ge 1 ] || { cat "$tmp/out" >&2; die "faulty (rank $r returns early, np $np): no rank named it as returned"; }
	if grep -qF "after 1h0m0s" "$tmp/out"; then
		cat "$tmp/out" >&2
		die "faulty (rank $r returns early, np $np): its peers waited out their bound"
	fi
	if grep -qiE 'desync|could not agree' "$tmp/out"; then
		cat "$tmp/out" >&2
		die "faulty (rank $r returns early, np $np): reported as a desync or a failed Finalize"
	fi
done
# A rank that drops the error of a collective that timed out and returns
# nil: its Finalize finds the world broken and ends the job (never exit 0).
for r in 0 3; do
	say "mpirun -np 4 faulty: world rank $r swallows a collective timeout: Finalize ends the job"
	faulty swallowed "$r" 4
	n=$(grep -cF "rank $r (world rank $r) aborts the MPI job from group \"world\" with code 1: mpi: Finalize: group \"world\" is broken: comm: collective timeout" "$tmp/out" || true)
	[ "$n" = 1 ] || { cat "$tmp/out" >&2; die "faulty (rank $r swallows a collective timeout): Finalize named the broken world $n times, want once"; }
done
say ok
