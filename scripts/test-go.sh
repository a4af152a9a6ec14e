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
PKG_TIMEOUT_S=${PKG_TIMEOUT_S:-900} # go test's -timeout 15m, per package
# go test puts its own toolchain first on PATH for the tests it runs (a test
# that runs go list must use the go that built it, and fail, not skip,
# where there is none).
PATH="$($GO env GOROOT)/bin:$PATH"
export PATH

# go list -e lists a package that does not load, so that it fails.
list=$($GO list -e -f '{{.ImportPath}} {{.Dir}} {{if or .TestGoFiles .XTestGoFiles}}tests{{else}}none{{end}}' ./...) || exit 1
pkgs=()
dirs=()
tested=()
while read -r p d has; do
	[ -n "$p" ] || continue
	case " $RACE_FREE " in *" $p "*) continue ;; esac
	pkgs+=("$p")
	dirs+=("$d")
	tested+=("$has")
done <<<"$list"
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "test-go: go list -e ./... found no package to test" >&2
	exit 1
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
rc=0

# binary I: where package I's test binary is. One go test -c builds them
# all at once into $bin/all, each named as go names it (the last element of
# its path); where two packages share that name, or the build fails, each
# package is built on its own, so that one that does not build fails alone
# and every other still runs, as under go test.
binary() { echo "$bin/pkg$1.test"; }
echo "test-go: go vet, and the test binaries built (-race), every package at once"
$GO vet "${pkgs[@]}" || rc=1
names=$(for p in "${pkgs[@]}"; do echo "${p##*/}"; done | sort | uniq -d)
mkdir -p "$bin/all"
if [ -z "$names" ] && $GO test -race -c -o "$bin/all/" "${pkgs[@]}" >"$bin/build.log" 2>&1; then
	for i in "${!pkgs[@]}"; do
		p=${pkgs[$i]}
		[ ! -e "$bin/all/${p##*/}.test" ] || mv "$bin/all/${p##*/}.test" "$(binary "$i")"
	done
else
	[ -z "$names" ] || echo "test-go: packages share a last path element ($names): building each on its own"
	for i in "${!pkgs[@]}"; do
		[ "${tested[$i]}" = tests ] || continue
		if ! $GO test -race -c -o "$(binary "$i")" "${pkgs[$i]}" >"$bin/build.$i.log" 2>&1; then
			cat "$bin/build.$i.log"
			echo "FAIL	${pkgs[$i]} [build failed]"
			rc=1
		fi
	done
fi

echo "$GO test -race -count=1 -p 1 -timeout ${PKG_TIMEOUT_S}s (every package but $RACE_FREE)"
for i in "${!pkgs[@]}"; do
	p=${pkgs[$i]}
	t=$(binary "$i")
	if [ "${tested[$i]}" != tests ]; then
		echo "?   	$p	[no test files]"
		continue
	fi
	if [ ! -x "$t" ]; then # its build failure is printed above, if it had one
		[ -e "$bin/build.$i.log" ] || echo "FAIL	$p [no test binary was built]"
		rc=1
		continue
	fi
	start=$(date +%s.%N)
	r=0
	# -test.timeout ends a test that runs too long with its goroutines'
	# stacks; timeout is go test's backstop for a binary that cannot (one
	# wedged in cgo), a minute later.
	(cd "${dirs[$i]}" && timeout --kill-after=30 $((PKG_TIMEOUT_S + 60)) "$t" -test.count=1 -test.timeout="${PKG_TIMEOUT_S}s" -test.paniconexit0) >"$bin/out" 2>&1 || r=$?
	took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3fs", b - a }')
	if [ "$r" -eq 0 ]; then
		echo "ok  	$p	$took"
	else
		cat "$bin/out"
		echo "FAIL	$p	$took (exit status $r)"
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
