#!/usr/bin/env bash
# make test-go: every package's tests under -race, one package at a time,
# and the checks beside them (see the Makefile).
#
# The test binaries are built first, all at once (go test -c: compiling and
# linking ~30 race-instrumented binaries one after the other was about two
# minutes of a loaded run), then each runs alone from its package's
# directory, as go test -p 1 runs it: multi-rank tests run many goroutine
# ranks under the race detector, and two such packages at once on a 2-core
# machine only slow each other. Output as go test's: "ok PKG TIME", or the
# failing package's whole output and "FAIL PKG TIME".
#
# RACE_FREE packages run without -race: they start no goroutine and neither
# do their tests (each has a TestStartsNoGoroutine that holds it, and
# cmd/rankrun's TestRaceSkipsRunInTheirTarget checks that it has), so the
# detector has nothing to compare there and only makes them five times
# slower; their code is raced in every package that calls it.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
RACE_FREE=${RACE_FREE:-github.com/rankrun/rankrun/topology}
PKG_TIMEOUT=${PKG_TIMEOUT:-15m}

# go list -e lists a package that does not load, so that it fails.
list=$($GO list -e -f '{{.ImportPath}} {{.Dir}}' ./...) || exit 1
pkgs=()
dirs=()
while read -r p d; do
	[ -n "$p" ] || continue
	case " $RACE_FREE " in *" $p "*) continue ;; esac
	pkgs+=("$p")
	dirs+=("$d")
done <<<"$list"
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "test-go: go list -e ./... found no package to test" >&2
	exit 1
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
rc=0

echo "test-go: go vet, and the test binaries built (-race), every package at once"
$GO vet "${pkgs[@]}" || rc=1
if ! $GO test -race -c -o "$bin/" "${pkgs[@]}" >"$bin/build.log" 2>&1; then
	grep -v 'no test files' "$bin/build.log" >&2
	echo "FAIL	test-go: the test binaries do not build" >&2
	exit 1
fi

echo "$GO test -race -count=1 -p 1 -timeout $PKG_TIMEOUT (every package but $RACE_FREE)"
for i in "${!pkgs[@]}"; do
	p=${pkgs[$i]}
	t="$bin/${p##*/}.test"
	if [ ! -x "$t" ]; then
		echo "?   	$p	[no test files]"
		continue
	fi
	start=$(date +%s.%N)
	r=0
	(cd "${dirs[$i]}" && "$t" -test.count=1 -test.timeout="$PKG_TIMEOUT" -test.paniconexit0) >"$bin/out" 2>&1 || r=$?
	took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3fs", b - a }')
	if [ "$r" -eq 0 ]; then
		echo "ok  	$p	$took"
	else
		cat "$bin/out"
		echo "FAIL	$p	$took"
		rc=1
	fi
done

echo "$GO test -count=1 -timeout 10m $RACE_FREE"
# shellcheck disable=SC2086
$GO test -count=1 -timeout 10m $RACE_FREE || rc=1
echo "$GO test -race -count=1 -tags nvml ./gpu (the real NVML)"
$GO test -race -count=1 -tags nvml ./gpu || rc=1
echo "CGO_ENABLED=0 $GO build ./... (every package but the MPI binding and NVML, which sit behind tags)"
CGO_ENABLED=0 $GO build ./... || rc=1
exit $rc
