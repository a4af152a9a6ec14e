#!/usr/bin/env bash
# End-to-end test of the rankrun CLI under real mpirun (Open MPI):
#
#  1. bin/rankrun-mpi (go build -tags mpi) under mpirun -np 5 runs ctx tp=1 ->
#     gen tp=4 with 32 requests, checked: every request completes, nothing
#     leaks, bytes are verified, and the counts (and the --requests-out
#     records) equal an in-process run of the same flags;
#  2. the same layouts under mpirun -np 4 fail non-zero, naming 5 and 4;
#  3. a binary built without MPI refuses to run under mpirun (never as N
#     copies of rank 0);
#  4-6. expert parallelism, chunked prefill, and a sim-only flag's one note
#     (below).
#
# Every mpirun is bounded by `timeout`. Exits non-zero on any failure.
# Without Open MPI (and no way to install it) the script skips with a
# message, except under CI=true, where that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MPI_TIMEOUT=${MPI_TIMEOUT:-120}
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}

# shellcheck source=lib-mpi.sh
. scripts/lib-mpi.sh
mpi_setup test-mpi-cli python3

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "test-mpi-cli: building bin/rankrun-mpi (-tags mpi) and a build without MPI"
mkdir -p bin
$GO build -tags mpi -o bin/rankrun-mpi ./cmd/rankrun
$GO build -o "$tmp/rankrun" ./cmd/rankrun

flags=(run --ctx tp=1 --gen tp=4 --requests 32 --json --checked)
mpi_reqs=(--requests-out "$tmp/mpi.jsonl")
local_reqs=(--requests-out "$tmp/local.jsonl")
mpirun_() {
	timeout --kill-after=10 "$MPI_TIMEOUT" mpirun --oversubscribe --bind-to none "$@"
}

echo "test-mpi-cli: mpirun -np 5 bin/rankrun-mpi ${flags[*]}"
if ! mpirun_ -np 5 bin/rankrun-mpi "${flags[@]}" "${mpi_reqs[@]}" >"$tmp/mpi.json" 2>"$tmp/mpi.err"; then
	cat "$tmp/mpi.err" >&2
	fail "mpirun -np 5 exited non-zero"
fi
echo "test-mpi-cli: in-process run with the same flags"
if ! "$tmp/rankrun" "${flags[@]}" "${local_reqs[@]}" >"$tmp/local.json" 2>"$tmp/local.err"; then
	cat "$tmp/local.err" >&2
	fail "the in-process run exited non-zero"
fi

python3 - "$tmp/mpi.json" "$tmp/local.json" "$tmp/mpi.jsonl" "$tmp/local.jsonl" <<'PY' || fail "the MPI report does not hold (see above)"
import json, sys
mpi, local = (json.load(open(p)) for p in sys.argv[1:3])
mpi_reqs, local_reqs = ([json.loads(l) for l in open(p)] for p in sys.argv[3:5])
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)
want(mpi["ranks"] == 5, f"ranks {mpi['ranks']} != 5")
want(mpi["requests_completed"] == 32, f"requests_completed {mpi['requests_completed']} != 32")
want(mpi["requests_failed"] == 0, f"requests_failed {mpi['requests_failed']} != 0")
want(mpi["leaked_blocks"] == 0, f"leaked_blocks {mpi['leaked_blocks']} != 0")
want(mpi["pinned_blocks_at_end"] == 0, f"pinned_blocks_at_end {mpi['pinned_blocks_at_end']} != 0")
want(mpi["bytes_verified"] > 0, f"bytes_verified {mpi['bytes_verified']} not > 0")
want(mpi["errors"] == [], f"errors {mpi['errors']}")
want(mpi["ttft_ms"]["n"] == 32, f"ttft_ms.n {mpi['ttft_ms']['n']} != 32")
for k in ["ranks", "requests_completed", "requests_failed", "requests_cancelled", "bytes_moved",
          "bytes_verified", "leaked_blocks", "pinned_blocks_at_end"]:
    want(mpi[k] == local[k], f"{k}: mpirun {mpi[k]} != in-process {local[k]}")
want(mpi["ttft_ms"]["n"] == local["ttft_ms"]["n"], "ttft_ms.n differs from the in-process run")
want(len(mpi_reqs) == 32, f"{len(mpi_reqs)} records in --requests-out, not 32")
# The files are in the order requests finished (under mpirun the other
# ranks' records come at the end): compare them by id.
by_id = lambda reqs: [(r["id"], r["state"]) for r in sorted(reqs, key=lambda r: r["id"])]
want(by_id(mpi_reqs) == by_id(local_reqs), "request ids or states differ")
want(len({r["id"] for r in mpi_reqs}) == 32, "a request recorded twice in --requests-out")
want(mpi["error"] is None, f"error {mpi['error']}")
# The report says how long the job ran (it said 0 s under mpirun): more
# than nothing, and no more than the whole run as it reports it plus a
# minute of start-up.
want(mpi["backend"] == "mpi", f"backend {mpi.get('backend')!r} != 'mpi'")
want(0 < mpi["wall_seconds"] < mpi["duration_s"] + 60, f"wall_seconds {mpi['wall_seconds']} not in (0, duration_s {mpi['duration_s']} + 60)")
for b in bad:
    print("test-mpi-cli:   " + b, file=sys.stderr)
if bad:
    sys.exit(1)
print(f"test-mpi-cli: ok: {mpi['requests_completed']} completed, {mpi['bytes_verified']} bytes verified, "
      f"0 leaked; equal to the in-process run")
PY

echo "test-mpi-cli: mpirun -np 4 with layouts that need 5 must fail"
if mpirun_ -np 4 bin/rankrun-mpi "${flags[@]}" >"$tmp/np4.out" 2>"$tmp/np4.err"; then
	fail "mpirun -np 4 succeeded; ctx tp=1 + gen tp=4 need 5 ranks"
else
	rc=$?
fi
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "mpirun -np 4 timed out instead of failing at once"
grep -q -- "-np 5" "$tmp/np4.err" && grep -q "world has 4 ranks" "$tmp/np4.err" ||
	{ cat "$tmp/np4.err" >&2; fail "mpirun -np 4: the error does not name 5 and 4"; }
[ ! -s "$tmp/np4.out" ] || fail "mpirun -np 4 printed a report"
echo "test-mpi-cli: ok: exit $rc, $(grep -m1 'world has 4 ranks' "$tmp/np4.err")"

echo "test-mpi-cli: a build without MPI under mpirun -np 2 must refuse"
if mpirun_ -np 2 "$tmp/rankrun" run --requests 4 --json >"$tmp/nompi.out" 2>"$tmp/nompi.err"; then
	fail "the build without MPI ran under mpirun"
else
	rc=$?
fi
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the build without MPI hung under mpirun"
grep -q "built without MPI" "$tmp/nompi.err" ||
	{ cat "$tmp/nompi.err" >&2; fail "the build without MPI did not say why it refused"; }
[ ! -s "$tmp/nompi.out" ] || fail "the build without MPI printed a report under mpirun"
echo "test-mpi-cli: ok: refused with exit $rc"

# 4. Expert parallelism under attention-DP: each step's EP dispatch counts
# go through a real MPI all-to-all on both sides (np=4), and a rank whose
# counts differ ends the job non-zero, named by the peer that got them.
ep=(run --model gpt-oss-120b --hardware gb200 --ctx dp=2,ep=2,adp --gen dp=2,ep=2,adp --requests 4 --input 128 --output 8 --json)
echo "test-mpi-cli: mpirun -np 4 bin/rankrun-mpi ${ep[*]}"
mpirun_ -np 4 bin/rankrun-mpi "${ep[@]}" >"$tmp/ep.json" 2>"$tmp/ep.err" ||
	{ cat "$tmp/ep.err" >&2; fail "the EP run exited non-zero"; }
python3 - "$tmp/ep.json" <<'PY' || fail "the EP run's report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests_completed"] == 4 and not r["errors"], (r["requests_completed"], r["errors"])
PY
for f in misroute@ctx:0,req=1 misroute@gen:1,req=2; do
	echo "test-mpi-cli: the same with --fault $f must fail naming its rank"
	if mpirun_ -np 4 bin/rankrun-mpi "${ep[@]}" --fault "$f" >"$tmp/mis.out" 2>"$tmp/mis.err"; then
		fail "--fault $f: the run succeeded"
	else
		rc=$?
	fi
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "--fault $f: timed out instead of failing"
	case $f in
	*ctx:0*) who="from ctx rank 0 (world rank 0)" ;;
	*) who="from gen rank 1 (world rank 3)" ;;
	esac
	grep -q "ep dispatch counts disagree.*$who" "$tmp/mis.err" ||
		{ cat "$tmp/mis.err" >&2; fail "--fault $f: the error does not name $who"; }
	echo "test-mpi-cli: ok: exit $rc, $who"
done

# 5. Chunked prefill under mpirun: a CTX group of two (tp=2) and a CTX
# attention-DP group with EP dispatch take the same chunks on every rank
# (no collective decides them); every request completes and the CTX line
# counts the chunks that did not end their prompt.
for layout in "--ctx tp=2 --gen tp=2" "--ctx dp=2,ep=2,adp --gen dp=2,ep=2,adp"; do
	# shellcheck disable=SC2206
	ch=(run --model gpt-oss-120b --hardware gb200 $layout --requests 6 --input 300 --output 4 --max-tokens 128 --chunked --json)
	echo "test-mpi-cli: mpirun -np 4 bin/rankrun-mpi ${ch[*]}"
	mpirun_ -np 4 bin/rankrun-mpi "${ch[@]}" >"$tmp/ch.json" 2>"$tmp/ch.err" ||
		{ cat "$tmp/ch.err" >&2; fail "the chunked run ($layout) exited non-zero"; }
	python3 - "$tmp/ch.json" <<'PY' || fail "the chunked run's report ($layout)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests_completed"] == 6 and not r["errors"], (r["requests_completed"], r["errors"])
assert r["scheduler"].endswith("chunked"), r["scheduler"]
ctx = [i for i in r["instances"] if i["role"] == "ctx"][0]
assert ctx["prefill_chunks"] >= 6, ctx  # 300 tokens under 128: at least two unfinished chunks each
assert r["bytes_verified"] == r["bytes_moved"] > 0, (r["bytes_verified"], r["bytes_moved"])
PY
	echo "test-mpi-cli: ok: chunked, $layout"
done

# 6. A simulation-only flag under mpirun changes nothing: world rank 0
# says so once (not once a rank), and the run completes.
echo "test-mpi-cli: mpirun -np 2 bin/rankrun-mpi run --ctx tp=1 --gen tp=1 --requests 4 --strategy pct"
mpirun_ -np 2 bin/rankrun-mpi run --ctx tp=1 --gen tp=1 --requests 4 --json --strategy pct >"$tmp/note.json" 2>"$tmp/note.err" ||
	{ cat "$tmp/note.err" >&2; fail "the run with --strategy pct exited non-zero"; }
n=$(grep -c "note: --strategy applies to --backend sim only; this mpi run ignores it" "$tmp/note.err" || true)
[ "$n" = 1 ] || { cat "$tmp/note.err" >&2; fail "--strategy under mpirun: $n notes, want 1 (world rank 0's)"; }
echo "test-mpi-cli: ok: one note"

echo "test-mpi-cli: PASS"
