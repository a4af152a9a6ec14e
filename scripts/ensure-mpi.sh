#!/usr/bin/env bash
# Makes sure Open MPI (headers, pkg-config file, mpirun) is installed for the
# MPI build of rankrun (go build -tags mpi). Quiet and exit 0 when it is;
# installs it when running as root; otherwise says what to install, exit 1.
set -euo pipefail

if pkg-config --exists ompi 2>/dev/null && command -v mpirun >/dev/null 2>&1; then
	exit 0
fi

pkgs="libopenmpi-dev openmpi-bin pkg-config"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "ensure-mpi: Open MPI missing; installing $pkgs" >&2
	export DEBIAN_FRONTEND=noninteractive
	# A fresh machine has empty package lists: update first.
	apt-get update -q >&2
	apt-get install -y -q $pkgs >&2
	if pkg-config --exists ompi && command -v mpirun >/dev/null 2>&1; then
		exit 0
	fi
	echo "ensure-mpi: installed $pkgs but pkg-config ompi or mpirun is still missing" >&2
	exit 1
fi

cat >&2 <<MSG
ensure-mpi: Open MPI is not installed (need \`pkg-config --exists ompi\` and mpirun).
Install it as root, e.g. on Debian/Ubuntu:
    sudo apt-get update && sudo apt-get install -y $pkgs
(Open MPI 4.1; MPICH is not supported: the binding builds against pkg-config ompi.)
MSG
exit 1
