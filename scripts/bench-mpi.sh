#!/usr/bin/env bash
# Go MPI binding vs a C reference (comm/mpi/bench/ref.c), same loops, same
# iteration counts, at np=2 and np=4: allreduce of one int64, the allgather
# pair (counts + allgatherv of 0..64 int64 per rank, varying per call), and
# 1 MiB / 64 MiB point-to-point. Prints a table of Go/C ratios and writes it
# as JSON to out/bench-mpi.json.
#
# Goals: Go/C <= 1.3x time for allreduce and the allgather pair, >= 0.8x
# bandwidth for 1 MiB. The C reference uses blocking MPI calls; the table
# also shows C with the non-blocking calls + MPI_Test polling that the Go
# binding must use to honour contexts (the floor for its design).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N_SMALL=${N_SMALL:-20000} # allreduce, allgather pair
N_1M=${N_1M:-500}
N_64M=${N_64M:-20}
NPS=${NPS:-"2 4"}
REPS=${REPS:-3} # each figure is the median of REPS runs (the VMs are noisy)

scripts/ensure-mpi.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$GO test -c -tags mpi -o "$tmp/mpi.test" ./comm/mpi/
# shellcheck disable=SC2046
gcc -O2 -o "$tmp/ref" comm/mpi/bench/ref.c $(pkg-config --cflags --libs ompi)

mpi() { timeout --kill-after=10 300 mpirun --oversubscribe --bind-to none "$@"; }

# median CMD... -> runs CMD REPS times; prints the run with the median first
# field (its whole line).
median() {
	for _ in $(seq "$REPS"); do "$@"; done | sort -g -k1,1 | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }'
}

# c_run NP WHICH N -> "ns/op MB/s"
c_run() {
	mpi -np "$1" "$tmp/ref" "$2" "$3" | awk -v w="$2" '$1 == w { print $3, $4 }'
}

# go_run NP BENCH N -> "ns/op MB/s allocs/op" (rank 0's line)
go_run() {
	rm -rf "$tmp/o"
	(cd comm/mpi && mpi --output-filename "$tmp/o" -np "$1" "$tmp/mpi.test" \
		-test.run '^$' -test.bench "^Benchmark$2\$" -test.benchtime "$3x" -test.benchmem >/dev/null)
	awk '/^Benchmark/ {
		ns = 0; mbs = 0; allocs = 0
		for (i = 1; i < NF; i++) {
			if ($(i+1) == "ns/op") ns = $i
			if ($(i+1) == "MB/s") mbs = $i
			if ($(i+1) == "allocs/op") allocs = $i
		}
		print ns, mbs, allocs
	}' "$tmp"/o/1/rank.0/stdout
}

mkdir -p out
json=out/bench-mpi.json
rows=()
printf '%-4s %-14s %8s %12s %12s %12s %10s %10s %7s\n' np bench iters go_ns/op c_ns/op c_nb_ns/op go/c go/c_nb allocs
for np in $NPS; do
	for spec in "allreduce:Allreduce1:$N_SMALL:iallreduce" "allgather_pair:AllgatherPair:$N_SMALL:iallgather" \
		"p2p_1MiB:P2P1MiB:$N_1M:" "p2p_64MiB:P2P64MiB:$N_64M:"; do
		IFS=: read -r name gobench n nb <<<"$spec"
		cwhich=$name
		case $name in
		allreduce) cwhich=allreduce ;;
		allgather_pair) cwhich=allgather ;;
		p2p_1MiB) cwhich=p2p1m ;;
		p2p_64MiB) cwhich=p2p64m ;;
		esac
		read -r c_ns c_mbs <<<"$(median c_run "$np" "$cwhich" "$n")"
		read -r g_ns g_mbs g_allocs <<<"$(median go_run "$np" "$gobench" "$n")"
		nb_ns=0
		if [ -n "$nb" ]; then read -r nb_ns _ <<<"$(median c_run "$np" "$nb" "$n")"; fi
		if [ "$c_mbs" != "0.0" ] && [ "$c_mbs" != "0" ]; then
			metric=bandwidth
			ratio=$(awk -v g="$g_mbs" -v c="$c_mbs" 'BEGIN { printf "%.2f", g / c }')
			goal=">=0.8"
			ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.8) ? "true" : "false" }')
			[ "$name" = p2p_64MiB ] && goal="none" && ok=null
			nbratio=null
		else
			metric=time
			ratio=$(awk -v g="$g_ns" -v c="$c_ns" 'BEGIN { printf "%.2f", g / c }')
			nbratio=$(awk -v g="$g_ns" -v c="$nb_ns" 'BEGIN { if (c > 0) printf "%.2f", g / c; else print "null" }')
			goal="<=1.3"
			ok=$(awk -v r="$ratio" 'BEGIN { print (r <= 1.3) ? "true" : "false" }')
		fi
		printf '%-4s %-14s %8s %12s %12s %12s %10s %10s %7s\n' "$np" "$name" "$n" "$g_ns" "$c_ns" "$nb_ns" \
			"$ratio$([ $metric = bandwidth ] && echo ' bw')" "$nbratio" "$g_allocs"
		rows+=("$(printf '{"np":%s,"bench":"%s","iterations":%s,"metric":"%s","go_ns_per_op":%s,"c_ns_per_op":%s,"c_nonblocking_ns_per_op":%s,"go_mb_per_s":%s,"c_mb_per_s":%s,"go_over_c":%s,"go_over_c_nonblocking":%s,"go_allocs_per_op":%s,"goal":"%s","meets_goal":%s}' \
			"$np" "$name" "$n" "$metric" "$g_ns" "$c_ns" "$nb_ns" "$g_mbs" "$c_mbs" "$ratio" "$nbratio" "$g_allocs" "$goal" "$ok")")
	done
done
{
	echo '{"tool":"scripts/bench-mpi.sh","reps":'"$REPS"',"ratio":"go/c: time ratio for collectives, bandwidth ratio for p2p","results":['
	for i in "${!rows[@]}"; do
		sep=,
		[ "$i" -eq $((${#rows[@]} - 1)) ] && sep=
		echo "  ${rows[$i]}$sep"
	done
	echo ']}'
} >"$json"
echo "bench-mpi: wrote $json"
