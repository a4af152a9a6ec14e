#!/usr/bin/env bash
# Memory bounded by design, against stated budgets: what a command holds
# must not grow with the length of its run. Each case reads the peak RSS
# the run reports (wall_peak_rss_bytes, from getrusage) and fails past its
# budget, which is ~3x what it measured on a 2-core, 23.5 GiB machine:
#
#   case                                               measured   budget
#   run, 50,000 requests, --trace and --requests-out      38 MB   128 MiB
#   sim, 2048 ranks (dp=1024 each side), 4096 requests   610 MB   1.5 GiB
#
# The first held every trace event and record until the end before they
# were streamed: 3.2 GB at 50,000 requests, 13.0 GB at 200,000 (the trace
# file is ~1 GB). Both files are checked whole: every request once, and
# the trace closed.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
say() { echo "test-memory: $*"; }
die() {
	echo "test-memory: FAIL: $*" >&2
	exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"} # go-nvml's header (-tags nvml)
mkdir -p bin
$GO build -tags nvml -o bin/rankrun ./cmd/rankrun # bin/rankrun is make build's, with NVML

# check NAME BUDGET_BYTES CMD...: runs CMD (a --json run), fails unless it
# exits 0 and reports a peak RSS within the budget.
check() {
	local name=$1 budget=$2
	shift 2
	timeout 600 "$@" >"$tmp/$name.json" 2>"$tmp/$name.err" || {
		tail -5 "$tmp/$name.err" >&2
		die "$name exited non-zero"
	}
	local rss
	rss=$(grep -o '"wall_peak_rss_bytes": *[0-9]*' "$tmp/$name.json" | grep -o '[0-9]*$') || die "$name: no wall_peak_rss_bytes in the report"
	[ "$rss" -gt 0 ] || die "$name: wall_peak_rss_bytes is 0"
	say "$name: peak RSS $((rss >> 20)) MiB (budget $((budget >> 20)) MiB)"
	[ "$rss" -le "$budget" ] || die "$name: peak RSS $rss bytes is over its budget of $budget"
}

n=50000
check streams $((128 << 20)) bin/rankrun run --requests $n --layers 1 --kv-heads 1 --head-dim 8 --json \
	--trace "$tmp/trace.json" --requests-out "$tmp/requests.jsonl"
lines=$(wc -l <"$tmp/requests.jsonl")
[ "$lines" -eq $n ] || die "streams: $lines records in --requests-out, want $n"
ids=$(grep -o '"id":[0-9]*' "$tmp/requests.jsonl" | sort -u | wc -l)
[ "$ids" -eq $n ] || die "streams: $ids distinct request ids in --requests-out, want $n"
head -c 40 "$tmp/trace.json" | grep -q '"traceEvents":\[' || die "streams: the trace does not open with traceEvents"
[ "$(tail -c 3 "$tmp/trace.json")" = "]}" ] || die "streams: the trace is not closed"
grep -c '"thread_name"' "$tmp/trace.json" | grep -qx 5 || die "streams: want one thread_name per rank (5)"

check sim-2048 $((1536 << 20)) bin/rankrun run --backend sim --ctx dp=1024 --gen dp=1024 --requests 4096 \
	--layers 1 --kv-heads 1 --head-dim 8 --json
say "ok"
