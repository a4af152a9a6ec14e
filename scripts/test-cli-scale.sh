#!/usr/bin/env bash
# A 1,000,000-request run ends with its report, in-process and under
# mpirun, and neither the report nor memory grows with the run beyond the
# per-request state: each run is measured beside a 100,000-request run of
# the same flags (report bytes and peak RSS, from /usr/bin/time), and the
# in-process run again with --trace and --requests-out, which stream.
#
# Tiny model, closed=256 so the control plane is the load. In-process
# (5 ranks) takes ~3 min on 2 cores; under mpirun ctx tp=1 -> gen tp=1
# (np 2, one core each) ~25 min. SCALE_N overrides the 1,000,000.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${SCALE_N:-1000000}
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
# shellcheck source=lib-mpi.sh
. scripts/lib-mpi.sh
mpi_setup test-cli-scale python3
[ -x /usr/bin/time ] || fail "/usr/bin/time is needed (apt-get install time)"
tmp=$(mktemp -d)
trap '[ -n "${SCALE_KEEP:-}" ] && cp -r "$tmp" "$SCALE_KEEP"; rm -rf "$tmp"' EXIT
mkdir -p bin
$GO build -tags nvml -o bin/rankrun ./cmd/rankrun # bin/rankrun is make build's, with NVML
$GO build -tags mpi -o bin/rankrun-mpi ./cmd/rankrun
flags=(run --layers 1 --kv-heads 1 --head-dim 8 --arrival closed=256 --json --timeout 1h) # the default 10 min ends the mpirun run (~25 min)

measure() { # NAME N CMD...: runs CMD, report in $tmp/NAME.json, "seconds maxrss_kb" lines in $tmp/NAME.time
	local name=$1
	shift
	echo "test-cli-scale: $name: $*" >&2
	"$@" >"$tmp/$name.json" 2>"$tmp/$name.err" || { tail "$tmp/$name.err" >&2; fail "$name exited non-zero"; }
	grep '^TIME ' "$tmp/$name.err" | cut -d' ' -f2- >"$tmp/$name.time"
}
T=(/usr/bin/time -f "TIME %e %M")
measure local-small "${T[@]}" bin/rankrun "${flags[@]}" --requests $((N / 10))
measure local-big "${T[@]}" bin/rankrun "${flags[@]}" --requests "$N"
# The same run with --trace and --requests-out: both stream to their files
# (~5 GB of trace at 1,000,000), so memory stays that of the plain run.
measure local-streams "${T[@]}" bin/rankrun "${flags[@]}" --requests "$N" --trace "$tmp/trace.json" --requests-out "$tmp/requests.jsonl"
mp=(timeout 3600 mpirun --oversubscribe --bind-to none -np 2)
measure mpi-small "${mp[@]}" "${T[@]}" bin/rankrun-mpi "${flags[@]}" --gen tp=1 --requests $((N / 10))
measure mpi-big "${mp[@]}" "${T[@]}" bin/rankrun-mpi "${flags[@]}" --gen tp=1 --requests "$N"

python3 - "$tmp" "$N" <<'PY' || fail "a figure does not hold (see above)"
import json, os, sys
tmp, n = sys.argv[1], int(sys.argv[2])
bad = []
for kind in ["local", "mpi"]:
    small, big = (json.load(open(f"{tmp}/{kind}-{s}.json")) for s in ["small", "big"])
    size = {s: os.path.getsize(f"{tmp}/{kind}-{s}.json") for s in ["small", "big"]}
    rss = {s: max(int(l.split()[1]) for l in open(f"{tmp}/{kind}-{s}.time")) for s in ["small", "big"]}
    secs = {s: max(float(l.split()[0]) for l in open(f"{tmp}/{kind}-{s}.time")) for s in ["small", "big"]}
    if big["requests_completed"] != n or big["error"] is not None:
        bad.append(f"{kind}: {big['requests_completed']} of {n} completed, error {big['error']}")
    if size["big"] > 2 * size["small"]:
        bad.append(f"{kind}: report {size['small']} -> {size['big']} bytes for 10x the requests")
    # The per-request state (the workload's requests, ~100 B each on world
    # rank 0) is allowed; nothing per iteration is.
    if rss["big"] - rss["small"] > 150 * 1024 * 9 / 10 * n / 1e6:
        bad.append(f"{kind}: peak RSS {rss['small']} -> {rss['big']} KB")
    print(f"test-cli-scale: {kind}: {n} requests in {secs['big']:.0f} s ({n // 10}: {secs['small']:.0f} s); report "
          f"{size['small']} -> {size['big']} bytes ({size['big'] / size['small']:.2f}x for 10x the requests); peak RSS per process "
          f"{rss['small']} -> {rss['big']} KB ({rss['big'] / rss['small']:.2f}x); TTFT p99 {big['ttft_ms']['p99']:.2f} ms (n={big['ttft_ms']['n']})")
plain = max(int(l.split()[1]) for l in open(f"{tmp}/local-big.time"))
streams = max(int(l.split()[1]) for l in open(f"{tmp}/local-streams.time"))
lines = sum(1 for _ in open(f"{tmp}/requests.jsonl"))
if lines != n:
    bad.append(f"local-streams: {lines} records in --requests-out, want {n}")
if streams - plain > 64 * 1024:
    bad.append(f"local-streams: peak RSS {plain} KB without the files, {streams} KB with them")
print(f"test-cli-scale: local with --trace and --requests-out: peak RSS {streams} KB ({plain} KB without them; "
      f"trace {os.path.getsize(f'{tmp}/trace.json')} bytes)")
for b in bad:
    print("test-cli-scale:   " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
echo "test-cli-scale: PASS"
