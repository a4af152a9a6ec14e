# Sourced by the MPI test scripts: mpi_setup NAME [python3]
#   - defines fail() printing "NAME: FAIL: ..." and exiting 1;
#   - makes sure Open MPI is installed (scripts/ensure-mpi.sh installs it as
#     root); without it the caller is skipped (exit 0), except under CI=true,
#     where MPI tests are never skipped and that is a failure;
#   - with "python3", requires python3 (the JSON checkers use it);
#   - exports the Open MPI settings every run here needs (root, ob1, no
#     single-copy mechanism in containers).
mpi_setup() {
	MPI_SCRIPT=$1
	fail() {
		echo "$MPI_SCRIPT: FAIL: $*" >&2
		exit 1
	}
	if ! scripts/ensure-mpi.sh; then
		if [ "${CI:-}" = true ]; then
			fail "Open MPI unavailable and CI=true (MPI tests are never skipped in CI)"
		fi
		echo "$MPI_SCRIPT: SKIPPED: Open MPI unavailable (see above)" >&2
		exit 0
	fi
	if [ "${2:-}" = python3 ]; then
		ensure_tools python3:python3
		command -v python3 >/dev/null 2>&1 || fail "python3 is needed to check the JSON reports"
	fi
	ensure_tools pgrep:procps
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	export OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
}

# ensure_tools CMD:PACKAGE...: installs the Debian package of every command
# that is missing, when root with apt-get (a fresh machine's package lists
# are empty: update first); otherwise leaves the caller to say what is
# missing.
ensure_tools() {
	local t missing=()
	for t in "$@"; do
		command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "${MPI_SCRIPT:-scripts}: installing ${missing[*]}" >&2
		DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || true
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 || true
	fi
}
