#!/usr/bin/env bash
# Runs every fuzz target of the module for a while each (default 20s):
#   scripts/fuzz.sh [DURATION]      e.g. scripts/fuzz.sh 2m
# Go runs one fuzz target at a time, so this loops over them. New crashers
# land in the package's testdata/fuzz/ and fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-20s}
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
found=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	found=$((found + 1))
	echo "fuzz: $pkg $name for $fuzztime"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
done < <(grep -rEo --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)' . | sed -E 's/:func /:/' | sort -u)
if [ "$found" = 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
echo "fuzz: $found targets, no crash"
