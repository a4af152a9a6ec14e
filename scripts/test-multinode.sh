#!/usr/bin/env bash
# Multi-node runs on one machine (issue 20, DESIGN.md §10): network
# namespaces stand in for hosts, and mpirun runs the MPI build across them as
# it would across real nodes.
#
# The hosts. Two network namespaces, h1 and h2 (rrmn<pid>-h1/-h2), joined by
# one veth pair: eth0 in each, 10.77.0.1/24 on h1 and 10.77.0.2/24 on h2.
# Those addresses exist only inside the two namespaces and neither has a
# route anywhere else, so every byte between ranks on different hosts crosses
# that link. Each host also has its own hostname (UTS namespace), its own
# /tmp and /dev/shm (tmpfs), and a process started there gets a fresh
# environment (PATH and HOME), as over ssh. The hosts share the filesystem
# (like an NFS home: the binaries and this script's work directory under
# /var/tmp), the kernel and its clock, and the PID namespace (so that this
# script can see and kill what is left on any host).
#
# Any checkout path works, /tmp included. A host's fresh /tmp would hide a
# checkout there (mpirun's daemons then found no bin/rankrun-mpi: exit 127),
# so every shared path under /tmp or /dev/shm (the checkout, and a probe
# directory this script makes to prove it, run 0 below) is bound back in at
# its own path, as an NFS mount would be: the same files at the same path
# on every host.
#
# The launch. mpirun runs on h1, inside h1's namespaces: the hosts' addresses
# cannot be reached from the root namespace, and the orted daemons that
# mpirun starts must reach it. Its hostfile names h1 and h2; its launch agent
# (plm_rsh_agent) is a wrapper that does what ssh would, entering the host's
# namespaces (ip netns exec) instead. The TCP BTL and the OOB are bound to
# eth0 (btl_tcp_if_include, oob_tcp_if_include). Where placement matters it
# is exact (the seq mapper: rank i runs on line i of the hostfile) and
# checked: every rank records its hostname and network namespace.
#
# The runs:
#  0. a run started from a directory under /tmp (a copy of bin/rankrun-mpi
#     in a probe directory there, run by its relative path from there, one
#     rank on each host): what a checkout under /tmp needs;
#  1. the comm/mpi conformance suite (built as scripts/test-mpi.sh builds it),
#     np=4, world ranks 0-1 on h1 and 2-3 on h2;
#  2. rankrun-mpi run --ctx tp=2 --gen tp=2 with CTX (world 0-1) on h1 and GEN
#     (world 2-3) on h2: the report equals the in-process run of the same
#     flags, and at least bytes_moved bytes went out of h1's eth0;
#  3. tests/mpicli's TestMpirunScenarios and TestMpirunExitFaultEndsTheJob
#     (every hand-written scenario case and the exit-fault tests; go test
#     -tags mpirun, MPIRUN set to this mpirun), ranks round-robin over the
#     two hosts (--map-by node);
#  4. faults only a network has, with world ranks 0 and 3 on h1 and 1 and 2 on
#     h2, so that the CTX and GEN groups span the link and every KV transfer
#     crosses it, under MN_CUT_FLAGS (--checked --collective-timeout 5s):
#     - cut: h1's eth0 taken down (ip link set down) mid-run, for good: the
#       job must end non-zero within CUT_BOUND, a rank must name the ranks that
#       never arrived, and no process may be left on either host;
#     - link back: eth0 down for MN_LINKBACK_DOWN (1 s, well below the
#       collective timeout) mid-run: the run must complete, every byte
#       verified, equal to the in-process run;
#     - cut between the CTX host and the GEN host (the placement of run 2):
#       no collective spans the link there, only point-to-point transfers;
#       the idle leader's liveness probe (executor probeIfStuck: no progress
#       for the collective timeout with work outstanding, then every world
#       rank asked through the stall inspector) names the ranks on the far
#       side. Required as for the cut: non-zero within CUT_BOUND, the ranks
#       on h2 named by a rank on h1, nothing left.
#     "Mid-run" is measured, not slept for: the link goes down once
#     MN_CUT_AFTER_BYTES have gone out of h1's eth0 during the run.
#     Both modes bound their waits: MN_CUT_FLAGS="--collective-timeout 5s"
#     (unchecked) passes the same checks (measured: cut named in 5.6 s,
#     ctx|gen cut in 7.0 s).
#
# Knobs that make a cut link visible in bounded time (the defaults take
# minutes). T is the collective timeout of the fault runs (MN_COLL_TIMEOUT):
#  - net.ipv4.tcp_retries2, set in h1 and h2 only (it is per network
#    namespace; the root namespace is left alone, and checked): how often the
#    kernel retransmits unacknowledged data before it drops a connection. With
#    the 200 ms RTO floor of a LAN that takes 0.2 s x (2^(R+1) - 1): 15 (the
#    default) is ~15 min, 5 is 12.6 s. After a cut, MPI_Abort's kill order to
#    the daemon on the far side and that daemon's report to mpirun are such
#    data: with the default, mpirun and the far daemon (and its ranks) wait
#    ~15 min. R cannot be small either: the ranks' own connections carry KV
#    and collective data at the cut, and once the kernel drops one, Open MPI
#    (ob1) aborts the rank at its next send ("pml_ob1_sendreq.c:190 FATAL")
#    before rankrun has named anyone. So R is the smallest value whose
#    give-up time exceeds T + 2 s (the stall inspector) + 3 s: 5 for T = 5 s.
#  - oob_tcp_keepalive_time/intvl/probes = 1 s, 1 s, T + 4 (passed with
#    --mca, which mpirun forwards to the daemons: an OMPI_MCA_ variable in
#    mpirun's environment does not reach them). The daemons and mpirun notice
#    a dead idle connection after time + intvl x probes (default 300 + 20 x 9
#    s, ~8 min): T + 5 s here, late enough not to pre-empt rankrun's own
#    error (<= T + 2 s after the cut) and soon enough that a cut-off daemon
#    with nothing to send does not keep running.
#  CUT_BOUND = T + 2 s + the TCP give-up time + 3 s (23 s for T = 5 s): the
#  job (mpirun) must have ended within it after the cut, and every process on
#  every host must be gone by CUT_BOUND + 5 s. Measured (T = 5 s): a rank
#  names the missing ranks ~7.0 s after the cut, mpirun exits ~0.2 s later
#  (the cut is on its host: the kill order cannot even be sent, and the
#  kernel drops the connection at once, having counted the unanswered
#  keepalive probes against tcp_retries2), the cut-off daemon and its ranks
#  are gone ~23 s after the cut (their report to mpirun runs into the full
#  retransmission give-up).
#
# Needs root, ip (iproute2) and unshare (util-linux). Where `ip netns add`
# fails (not root, no CAP_SYS_ADMIN, a kernel without network namespaces) the
# script says why and skips, also under CI=true; where it works it never
# skips. Without Open MPI: lib-mpi.sh's rule (skipped, except under CI=true).
# Everything it creates (namespaces, veth pair, work directory) is removed on
# exit, also when a check fails or the script is interrupted; processes left
# in the namespaces are killed. Every mpirun is bounded by `timeout`.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
GO=${GO:-go}
MPI_TIMEOUT=${MPI_TIMEOUT:-120}                   # seconds, per mpirun
T=${MN_COLL_TIMEOUT:-5}                           # seconds: collective timeout of the fault runs
CUT_FLAGS=${MN_CUT_FLAGS:-"--checked --collective-timeout ${T}s"}
LINKBACK_DOWN=${MN_LINKBACK_DOWN:-1}              # seconds the link is down in the link-back test
CUT_AFTER_BYTES=${MN_CUT_AFTER_BYTES:-20000000}   # bytes out of h1's eth0 before the link goes down
PARTS=" ${MN_PARTS:-0 1 2 3 4} "                  # which of the runs below (a subset, while debugging)
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}

# shellcheck source=lib-mpi.sh
. scripts/lib-mpi.sh
mpi_setup test-multinode python3

skip() {
	echo "test-multinode: SKIPPED: $*" >&2
	exit 0
}
ensure_tools ip:iproute2 unshare:util-linux timeout:coreutils
for tool in ip unshare timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		[ "${CI:-}" != true ] || fail "$tool not found and CI=true (install iproute2 / util-linux / coreutils)"
		skip "$tool not found (iproute2 / util-linux / coreutils)"
	fi
done

now_us() { echo "${EPOCHREALTIME/./}"; }
secs() { printf '%d.%02d' $(($1 / 1000000)) $(($1 % 1000000 / 10000)); } # µs -> "S.ss"
t_script=$(now_us)

id=rrmn$$
probe=
NS1=$id-h1
NS2=$id-h2
made_ns=()
work=
cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	local j
	for j in $(jobs -p); do kill "$j" 2>/dev/null; done
	local ns pids i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		pids=
		for ns in "${made_ns[@]}"; do pids+=" $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"; done
		[ -n "${pids// /}" ] || break
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null
		sleep 0.2
	done
	[ -z "${pids// /}" ] || echo "test-multinode: could not kill processes left in the namespaces: $pids" >&2
	for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || echo "test-multinode: could not delete namespace $ns" >&2; done
	[ -z "$work" ] || rm -rf "$work"
	[ -z "$probe" ] || rm -rf "$probe"
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "test-multinode: interrupted" >&2; exit 130' INT
trap 'echo "test-multinode: terminated" >&2; exit 143' TERM

if ! err=$(ip netns add "$NS1" 2>&1); then
	skip "cannot create a network namespace (ip netns add: ${err:-failed}; needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN)"
fi
made_ns+=("$NS1")
ip netns add "$NS2" || fail "ip netns add $NS2"
made_ns+=("$NS2")

# One veth pair, created in the namespaces (nothing appears in the root one).
ip -n "$NS1" link add eth0 type veth peer name eth0 netns "$NS2" || fail "creating the veth pair between $NS1 and $NS2"
ip -n "$NS1" addr add 10.77.0.1/24 dev eth0
ip -n "$NS2" addr add 10.77.0.2/24 dev eth0
for ns in "$NS1" "$NS2"; do
	ip -n "$ns" link set lo up
	ip -n "$ns" link set eth0 up
done

# tcp_retries2: the smallest R whose give-up time 0.2 s x (2^(R+1) - 1)
# exceeds T + 5 s (tenths of a second below).
R=3
while [ $((2 * ((1 << (R + 1)) - 1))) -le $((10 * (T + 5))) ]; do R=$((R + 1)); done
give_up_ds=$((2 * ((1 << (R + 1)) - 1)))
root_retries=$(cat /proc/sys/net/ipv4/tcp_retries2)
for ns in "$NS1" "$NS2"; do
	ip netns exec "$ns" sh -c "echo $R >/proc/sys/net/ipv4/tcp_retries2" || fail "setting tcp_retries2 in $ns"
	[ "$(ip netns exec "$ns" cat /proc/sys/net/ipv4/tcp_retries2)" = "$R" ] || fail "tcp_retries2 in $ns did not take $R"
done
if [ "$(cat /proc/sys/net/ipv4/tcp_retries2)" != "$root_retries" ]; then
	echo "$root_retries" >/proc/sys/net/ipv4/tcp_retries2
	fail "this kernel does not keep tcp_retries2 per network namespace (the root value changed; restored to $root_retries)"
fi
PROBES=$((T + 4))
CUT_BOUND=$((T + 2 + (give_up_ds + 9) / 10 + 3)) # seconds after the cut
CLEAN_BOUND=$((CUT_BOUND + 5))

work=$(mktemp -d "${MN_WORK_BASE:-/var/tmp}/rankrun-multinode.XXXXXX")
mkdir -p "$work/bin" "$work/tmp" "$work/place" "$work/stash"
printf 'h1 slots=2\nh2 slots=2\n' >"$work/hostfile"
probe=$(mktemp -d /tmp/rankrun-multinode-probe.XXXXXX)
repo=$(pwd -P)
# The shared paths a host's own /tmp and /dev/shm would hide: bound into
# each host at the same path (see the header).
shared=
for p in "$repo" "$probe"; do
	case $p/ in /tmp/* | /dev/shm/*) shared="$shared $p" ;; esac
done
case $work/ in /tmp/* | /dev/shm/*) fail "the work directory $work must not be under /tmp or /dev/shm (each host has its own; set MN_WORK_BASE)" ;; esac

# host HOST CMD...: runs CMD on HOST: in its network namespace, with its
# hostname, its own /tmp and /dev/shm (tmpfs in the mount namespace that ip
# netns exec creates, gone with its last process).
cat >"$work/bin/host" <<EOF
#!/bin/sh
case \$1 in
h1) ns=$NS1 ;;
h2) ns=$NS2 ;;
*) echo "host: unknown host \$1" >&2; exit 255 ;;
esac
# Each shared path under /tmp or /dev/shm is bound aside before the fresh
# tmpfs hides it, then back at its own path.
exec ip netns exec "\$ns" unshare --uts -- /bin/sh -c '
hostname "\$0" || exit 1
i=0
for p in $shared; do i=\$((i + 1)); mkdir -p $work/stash/\$i && mount --bind "\$p" $work/stash/\$i || exit 1; done
mount -t tmpfs rrmn-tmp /tmp && mount -t tmpfs rrmn-shm /dev/shm || exit 1
i=0
for p in $shared; do i=\$((i + 1)); mkdir -p "\$p" && mount --bind $work/stash/\$i "\$p" || exit 1; done
exec "\$@"' "\$@"
EOF
# netns-agent HOST WORDS...: mpirun's launch agent in place of ssh: like ssh,
# it runs the words, joined, with sh on HOST, in a fresh environment.
cat >"$work/bin/netns-agent" <<EOF
#!/bin/sh
host=\$1
shift
exec env -i PATH="\$PATH" HOME="\${HOME:-/}" $work/bin/host "\$host" /bin/sh -c "\$*"
EOF
# mpirun [--place H,H,...] ARGS...: mpirun on h1 over h1 and h2. --place puts
# world rank i on the i-th host listed (the seq mapper); without it ranks go
# round-robin over the hosts.
cat >"$work/bin/mpirun" <<EOF
#!/bin/bash
echo "\$*" >>$work/mpirun.log
map=(--hostfile $work/hostfile --map-by node)
if [ "\${1:-}" = --place ]; then
	f=\$(mktemp $work/tmp/seq.XXXXXX)
	tr , '\n' <<<"\$2" >"\$f"
	map=(--hostfile "\$f" --mca rmaps seq)
	shift 2
fi
exec $work/bin/host h1 mpirun "\${map[@]}" --mca plm_rsh_agent $work/bin/netns-agent \\
	--mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 \\
	--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes $PROBES "\$@"
EOF
# rank-exec DIR OUT CMD...: records "RANK HOSTNAME NETNS" in DIR/RANK, sends
# stdout to OUT.RANK (OUT "-": keeps it), runs CMD.
cat >"$work/bin/rank-exec" <<'EOF'
#!/bin/sh
dir=$1 out=$2
shift 2
r=$OMPI_COMM_WORLD_RANK
echo "$r $(hostname) $(ip netns identify)" >"$dir/$r"
[ "$out" = - ] || exec "$@" >"$out.$r"
exec "$@"
EOF
chmod +x "$work/bin/host" "$work/bin/netns-agent" "$work/bin/mpirun" "$work/bin/rank-exec"
MN=$work/bin/mpirun
echo "test-multinode: hosts h1 ($NS1, 10.77.0.1) and h2 ($NS2, 10.77.0.2) on one veth pair;" \
	"tcp_retries2=$R in both (TCP gives up after $(secs $((give_up_ds * 100000))) s), OOB keepalive 1 s + 1 s x $PROBES;" \
	"cut bound ${CUT_BOUND} s (collective timeout ${T} s)"

tx() { ip netns exec "$NS1" cat /sys/class/net/eth0/statistics/tx_bytes; }
mpirun_() { # mpirun_ LIMIT ARGS...
	local limit=$1
	shift
	timeout --kill-after=10 "$limit" "$MN" "$@"
}
# check_place TAG H,H,...: world rank i ran on the i-th host, in its namespace.
check_place() {
	local tag=$1 want i=0 h r host ns
	IFS=, read -r -a want <<<"$2"
	for h in "${want[@]}"; do
		[ -f "$work/place/$tag/$i" ] || fail "$tag: world rank $i recorded no placement"
		read -r r host ns <"$work/place/$tag/$i"
		[ "$host" = "$h" ] && [ "$ns" = "$id-$h" ] || fail "$tag: world rank $i ran on $host ($ns), want $h ($id-$h)"
		i=$((i + 1))
	done
	[ "$(find "$work/place/$tag" -type f | wc -l)" -eq "$i" ] || fail "$tag: more ranks than the ${#want[@]} placed"
}
place_dir() { rm -rf "${work:?}/place/$1" && mkdir -p "$work/place/$1" && echo "$work/place/$1"; }
left_in_hosts() { { ip netns pids "$NS1"; ip netns pids "$NS2"; } | tr '\n' ' '; }
assert_nothing_left() { # WHAT
	sleep 0.3
	local left
	left=$(left_in_hosts)
	[ -z "${left// /}" ] || fail "$1: processes left on the hosts: $(ps -o pid=,comm= -p "$(tr ' ' , <<<"${left% }")" | tr '\n' ' ')"
}

timings=()
timed() { timings+=("$(printf '%-58s %7ss' "$1" "$(secs $(($(now_us) - $2)))")"); }

echo "test-multinode: building bin/rankrun-mpi, bin/rankrun and the comm/mpi test binary (-tags mpi -race)"
t0=$(now_us)
mkdir -p bin
$GO build -tags mpi -o bin/rankrun-mpi ./cmd/rankrun
$GO build -tags nvml -o bin/rankrun ./cmd/rankrun # bin/rankrun is make build's, with NVML
$GO test -c -race -tags mpi -o "$work/mpi.test" ./comm/mpi/
timed "build" "$t0"

part() { [[ $PARTS == *" $1 "* ]]; }
jq_() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

# 0. From a directory under /tmp: a copy of the binary in the probe
# directory, run by its relative path with the probe as the working
# directory, one rank on each host (a checkout under /tmp is run so).
if part 0; then
echo "test-multinode: a run from a directory under /tmp ($probe), world rank 0 on h1, 1 on h2"
t0=$(now_us)
d=$(place_dir probe)
mkdir -p "$probe/bin"
cp bin/rankrun-mpi "$probe/bin/rankrun-mpi"
(cd "$probe" && mpirun_ "$MPI_TIMEOUT" --place h1,h2 --oversubscribe --bind-to none -np 2 \
	"$work/bin/rank-exec" "$d" "$work/probe.out" bin/rankrun-mpi run --ctx tp=1 --gen tp=1 --requests 4 --json) 2>"$work/probe.err" ||
	{ tail -c 3000 "$work/probe.err" >&2; fail "a run from $probe (under /tmp) over two hosts failed: a checkout under /tmp would too"; }
check_place probe h1,h2
[ "$(jq_ "$work/probe.out.0" requests_completed)" = 4 ] || fail "the run from $probe did not complete its 4 requests"
timed "0. a run from a directory under /tmp" "$t0"
fi

# 1. The conformance suite, 2 ranks per host.
if part 1; then
echo "test-multinode: comm/mpi conformance suite, np=4, world ranks 0-1 on h1, 2-3 on h2"
t0=$(now_us)
d=$(place_dir conformance)
# All ranks agree on the exit code (World.Finalize reduces it).
(cd comm/mpi && mpirun_ 300 --place h1,h1,h2,h2 --oversubscribe --bind-to none -np 4 \
	"$work/bin/rank-exec" "$d" - "$work/mpi.test" -test.count=1 -test.timeout=280s) >"$work/conf.out" 2>&1 ||
	{ tail -c 4000 "$work/conf.out" >&2; fail "the conformance suite over two hosts failed"; }
check_place conformance h1,h1,h2,h2
[ "$(grep -c '^PASS$' "$work/conf.out")" -eq 4 ] || { tail -c 4000 "$work/conf.out" >&2; fail "conformance: want PASS from each of the 4 ranks"; }
timed "1. conformance suite np=4 over 2 hosts" "$t0"
fi

# compare_report NAME MPI_JSON LOCAL_JSON REQUESTS: the MPI report is clean
# and its counts equal the in-process run's.
compare_report() {
	python3 - "$@" <<'PY' || fail "$1: the report does not hold (see above)"
import json, sys
name, mpi_p, local_p, requests = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    mpi = json.load(open(mpi_p))
except ValueError as e:
    print(f"test-multinode: {name}: rank 0's stdout is not one JSON report: {e}", file=sys.stderr)
    sys.exit(1)
local = json.load(open(local_p))
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)
want(mpi["ranks"] == 4, f"ranks {mpi['ranks']} != 4")
want(mpi["requests_completed"] == requests, f"requests_completed {mpi['requests_completed']} != {requests}")
want(mpi["errors"] == [], f"errors {mpi['errors']}")
want(mpi["leaked_blocks"] == 0 and mpi["pinned_blocks_at_end"] == 0, "leaked or pinned blocks at the end")
want(mpi["bytes_verified"] > 0 and mpi["bytes_verified"] == mpi["bytes_moved"],
     f"bytes_verified {mpi['bytes_verified']} != bytes_moved {mpi['bytes_moved']}")
for k in ["requests_completed", "requests_failed", "requests_cancelled", "bytes_moved", "bytes_verified",
          "leaked_blocks", "pinned_blocks_at_end"]:
    want(mpi[k] == local[k], f"{k}: over two hosts {mpi[k]} != in-process {local[k]}")
for b in bad:
    print(f"test-multinode: {name}:   {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# 2. CTX on h1, GEN on h2.
if part 2; then
flags=(run --ctx tp=2 --gen tp=2 --json)
echo "test-multinode: rankrun-mpi ${flags[*]}: CTX (world 0-1) on h1, GEN (world 2-3) on h2"
t0=$(now_us)
d=$(place_dir ctxgen)
b0=$(tx)
mpirun_ "$MPI_TIMEOUT" --place h1,h1,h2,h2 --oversubscribe --bind-to none -np 4 \
	"$work/bin/rank-exec" "$d" "$work/ctxgen.out" bin/rankrun-mpi "${flags[@]}" 2>"$work/ctxgen.err" ||
	{ tail -c 4000 "$work/ctxgen.err" >&2; fail "rankrun-mpi ${flags[*]} over two hosts exited non-zero"; }
crossed=$(($(tx) - b0))
check_place ctxgen h1,h1,h2,h2
timeout "$MPI_TIMEOUT" bin/rankrun "${flags[@]}" >"$work/ctxgen.local" 2>"$work/ctxgen.local.err" ||
	{ cat "$work/ctxgen.local.err" >&2; fail "the in-process run of ${flags[*]} exited non-zero"; }
for r in 1 2 3; do [ ! -s "$work/ctxgen.out.$r" ] || fail "ctx|gen: world rank $r printed on stdout (only rank 0 reports)"; done
compare_report "ctx|gen" "$work/ctxgen.out.0" "$work/ctxgen.local" 64
moved=$(jq_ "$work/ctxgen.out.0" bytes_moved)
[ "$crossed" -ge "$moved" ] || fail "ctx|gen: only $crossed bytes went out of h1's eth0, less than the $moved KV bytes CTX (h1) sent GEN (h2)"
timed "2. run --ctx tp=2 --gen tp=2, CTX on h1, GEN on h2" "$t0"
echo "test-multinode: ok: $(jq_ "$work/ctxgen.out.0" bytes_verified) bytes verified, equal to the in-process run; $crossed bytes out of h1's eth0"
fi

# 3. The scenarios, through the same machinery as on one host.
if part 3; then
echo "test-multinode: tests/mpicli's scenarios and exit-fault tests, ranks round-robin over h1 and h2"
t0=$(now_us)
: >"$work/mpirun.log"
# The hand-written cases and the exit-fault tests; the generated
# attention-DP family (TestMpirunScenariosADP, 78 more, ~7 minutes over TCP
# on 2 cores) runs on one host in make test-mpi (MN_ADP=1 runs it here too).
tests='TestMpirunScenarios|TestMpirunExitFaultEndsTheJob'
[ "${MN_ADP:-0}" = 0 ] || tests="$tests|TestMpirunScenariosADP"
MPIRUN=$MN TMPDIR=$work/tmp PATH="$($GO env GOROOT)/bin:$PATH" \
	$GO test -tags mpirun -count=1 -timeout 40m -v -run "^($tests)\$" ./tests/mpicli | tee "$work/scenarios.out" ||
	fail "tests/mpicli's scenarios over two hosts failed"
# Every case (a subtest, one mpirun each) went through this mpirun (not the
# plain one, on one host).
cases=$(grep -cE "^ +--- PASS: ($tests)/" "$work/scenarios.out" || true)
[ "$cases" -gt 0 ] && [ "$(wc -l <"$work/mpirun.log")" -eq "$cases" ] ||
	fail "scenarios: $(wc -l <"$work/mpirun.log") runs went through the two-host mpirun, want one per case (${cases:-?})"
assert_nothing_left "scenarios"
timed "3. scenarios (tests/mpicli) over 2 hosts" "$t0"
fi

# 4. Faults only a network has.
#
# fault_run NAME PLACE DOWN_S FLAGS...: starts the run, takes h1's eth0 down
# once CUT_AFTER_BYTES went out of it, brings it back after DOWN_S (0: never),
# waits for the job and for every process on the hosts to end. Sets rc,
# cut_us/cut_s (job end after the cut), named_us/named_s (first "rankrun:
# world rank" line after the cut, empty if none), clean_s (nothing left on
# the hosts after the cut), left_procs (what was still there at
# CLEAN_BOUND), after_up (bytes out of h1 after the link came back), and
# leaves stdout in $work/fault.out.R, stderr in $work/fault.err.
fault_run() {
	local name=$1 place=$2 down=$3
	shift 3
	fault_place=$place
	local d b0 t_start t_cut t_up t_named= t_end left
	d=$(place_dir fault)
	rm -f "$work/fault.rc" "$work"/fault.out.*
	b0=$(tx)
	t_start=$(now_us)
	(
		rc=0
		mpirun_ $((CLEAN_BOUND + 60)) --place "$place" --oversubscribe --bind-to none -np 4 \
			"$work/bin/rank-exec" "$d" "$work/fault.out" bin/rankrun-mpi "$@" 2>"$work/fault.err" || rc=$?
		echo "$rc $(now_us)" >"$work/fault.rc"
	) &
	while [ $(($(tx) - b0)) -lt "$CUT_AFTER_BYTES" ]; do
		[ ! -e "$work/fault.rc" ] || { tail -c 3000 "$work/fault.err" >&2; fail "$name: the run ended before $CUT_AFTER_BYTES bytes crossed the link: nothing was cut mid-run"; }
		[ $(($(now_us) - t_start)) -lt 60000000 ] || fail "$name: $CUT_AFTER_BYTES bytes did not cross the link within 60 s"
		sleep 0.02
	done
	ip -n "$NS1" link set eth0 down
	t_cut=$(now_us)
	if [ "$down" != 0 ]; then
		sleep "$down"
		ip -n "$NS1" link set eth0 up
		t_up=$(now_us)
		[ ! -e "$work/fault.rc" ] || fail "$name: the run ended while the link was down"
		b_up=$(tx)
	fi
	while [ ! -e "$work/fault.rc" ]; do
		if [ -z "$t_named" ] && grep -q '^rankrun: world rank [0-9]*: ' "$work/fault.err"; then t_named=$(now_us); fi
		sleep 0.1
	done
	read -r rc t_end <"$work/fault.rc"
	if [ -z "$t_named" ] && grep -q '^rankrun: world rank [0-9]*: ' "$work/fault.err"; then t_named=$t_end; fi
	while left=$(left_in_hosts) && [ -n "${left// /}" ] && [ $(($(now_us) - t_cut)) -lt $((CLEAN_BOUND * 1000000)) ]; do
		sleep 0.2
	done
	clean_s=
	[ -n "${left// /}" ] || clean_s=$(secs $(($(now_us) - t_cut)))
	left_procs=
	[ -z "${left// /}" ] || left_procs=$(ps -o pid=,comm= -p "$(tr ' ' , <<<"${left% }")" | tr '\n' ' ')
	# Back up for the next run, with fresh neighbour (ARP) tables: an entry
	# whose resolution began while the link was down fails a moment after
	# it is back, and takes the next job's first connection with it (its
	# daemon "was unable to complete a TCP connection" to mpirun: measured).
	ip -n "$NS1" link set eth0 up
	ip -n "$NS1" neigh flush dev eth0
	ip -n "$NS2" neigh flush dev eth0
	cut_s=$(secs $((t_end - t_cut)))
	cut_us=$((t_end - t_cut))
	named_us= named_s=
	[ -z "$t_named" ] || { named_us=$((t_named - t_cut)) && named_s=$(secs "$named_us"); }
	check_place fault "$(tr ' ' , <<<"$place")"
	[ "$down" = 0 ] || after_up=$(($(tx) - b_up))
}

# must_fail NAME NEED_NAMED: the checks after a cut for good.
must_fail() {
	local name=$1 need_named=$2 bad=() first named_what=
	[ "$rc" -ne 0 ] || bad+=("exit 0, want non-zero: the job went on without the link")
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || bad+=("exit $rc: mpirun hung until its timeout")
	[ "$cut_us" -le $((CUT_BOUND * 1000000)) ] || bad+=("the job ended ${cut_s} s after the cut, bound ${CUT_BOUND} s")
	[ -z "$left_procs" ] || bad+=("${CLEAN_BOUND} s after the cut, processes left on the hosts: $left_procs")
	# One report per job, from world rank 0, naming the error (issue 13:
	# a run that fails still reports what it measured); no other rank prints.
	for r in 1 2 3; do [ ! -s "$work/fault.out.$r" ] || bad+=("world rank $r printed a report"); done
	if [ -s "$work/fault.out.0" ]; then
		python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(0 if r.get("error") else 1)' "$work/fault.out.0" ||
			bad+=("world rank 0's report has no error object")
	fi
	first=$(grep -m1 -E '^rankrun: world rank [0-9]+: ' "$work/fault.err" || true)
	if [ "$need_named" = yes ]; then
		# A rank on h1 (whose stderr mpirun still gets) names the ranks of
		# its group that never arrived, and they are the ones on h2. The
		# error names group ranks; groups of --ctx tp=2 --gen tp=2 are
		# world/s1c1/... (CTX: world ranks 0-1) and world/s1c2/... (GEN:
		# world ranks 2-3).
		named_what=$(python3 - "$work/fault.err" "$fault_place" <<'PY'
import re, sys
place = sys.argv[2].split(",")
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r'rankrun: world rank (\d+): .*comm: collective timeout on group "world(?:/s1c([12])/[^"]*)?"[^:]*: '
                 r'rank (\d+)(?: \(world rank \d+\))? waited .*?; ranks \[([\d ]+)\] never arrived( \(world ranks \[([\d ]+)\]\))?', line)
    if not m:
        continue
    # group "world" (the liveness probe): its ranks are world ranks.
    me, base = int(m.group(1)), {"1": 0, "2": 2, None: 0}[m.group(2)]
    named = [base + int(g) for g in m.group(4).split()]
    if m.group(6):  # the error translates them itself
        named = [int(g) for g in m.group(6).split()]
    if place[me] == "h1" and named and all(place[w] == "h2" for w in named):
        print(f"world rank {me} (h1) named world rank(s) {named} (h2)")
        sys.exit(0)
sys.exit(1)
PY
		) || bad+=("no rank on h1 named the ranks on h2 as never arrived (collective timeout)")
		[ -n "$named_us" ] && [ "$named_us" -le $(((T + 4) * 1000000)) ] ||
			bad+=("the first rank error came ${named_s:-never} ${named_s:+s }after the cut, want within T + 4 = $((T + 4)) s")
	fi
	if [ ${#bad[@]} -gt 0 ]; then
		printf '    %s\n' "${bad[@]}" >&2
		echo "    (exit $rc ${cut_s} s after the cut; nothing left after ${clean_s:-(never)} s)" >&2
		echo "    --- stderr (first 40 lines) ---" >&2
		head -40 "$work/fault.err" >&2
		fail "$name: ${bad[0]}"
	fi
	echo "test-multinode: ok: $name: exit $rc ${cut_s} s after the cut;" \
		"${named_what:+$named_what ${named_s} s after it; }nothing left on the hosts after ${clean_s} s"
	echo "    ${first:-$(grep -m1 -v '^-*$' "$work/fault.err" || true)}" | cut -c1-400
}

if part 4; then
place=h1,h2,h2,h1
cross=(run --ctx tp=2 --gen tp=2 --requests 400 --json)
read -r -a cut_flags <<<"$CUT_FLAGS"
timeout "$MPI_TIMEOUT" bin/rankrun "${cross[@]}" "${cut_flags[@]}" >"$work/cross.local" 2>"$work/cross.local.err" ||
	{ cat "$work/cross.local.err" >&2; fail "the in-process run of ${cross[*]} $CUT_FLAGS exited non-zero"; }

echo "test-multinode: cut: h1's eth0 down for good mid-run; world 0,3 on h1, 1,2 on h2; ${cross[*]} $CUT_FLAGS"
t0=$(now_us)
fault_run cut "$place" 0 "${cross[@]}" "${cut_flags[@]}"
must_fail "cut" yes
cp "$work/fault.err" "$work/cut.err"
timed "4a. cut for good (groups span the link)" "$t0"

echo "test-multinode: link back: h1's eth0 down ${LINKBACK_DOWN} s mid-run, then up; same run"
t0=$(now_us)
fault_run "link back" "$place" "$LINKBACK_DOWN" "${cross[@]}" "${cut_flags[@]}"
if [ "$rc" -ne 0 ]; then
	head -40 "$work/fault.err" >&2
	fail "link back: exit $rc after a ${LINKBACK_DOWN} s outage (bound: collective timeout ${T} s)"
fi
[ "$after_up" -gt 0 ] || fail "link back: no byte crossed the link after it came back: the outage was not mid-run"
assert_nothing_left "link back"
compare_report "link back" "$work/fault.out.0" "$work/cross.local" 400
echo "test-multinode: ok: link back: all 400 requests, $(jq_ "$work/fault.out.0" bytes_verified) bytes verified (equal to the in-process run), ${after_up} bytes out of h1 after the link came back"
timed "4b. link back after ${LINKBACK_DOWN} s" "$t0"

echo "test-multinode: cut between the CTX host (h1) and the GEN host (h2), for good; ${cross[*]} $CUT_FLAGS"
t0=$(now_us)
fault_run "cut ctx|gen" h1,h1,h2,h2 0 "${cross[@]}" "${cut_flags[@]}"
must_fail "cut ctx|gen" yes
timed "4c. cut between the CTX and the GEN host" "$t0"
fi

echo
echo "test-multinode: timings"
timed "whole script" "$t_script"
printf '  %s\n' "${timings[@]}"
echo "test-multinode: PASS"
