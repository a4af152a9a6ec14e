# rankrun: make run (the main job, in-process) and make test (the whole suite).
GO      ?= go
# go-nvml's vendored header prints ~150 deprecation warnings on a cold build.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
BIN     := bin
FUZZTIME ?= 20s

.PHONY: all build build-mpi run test test-go test-mpi test-scale bench lint fuzz soak mpi-deps clean

all: build

build:
	$(GO) build ./...
	$(GO) build -o $(BIN)/rankrun ./cmd/rankrun

# The MPI build needs Open MPI; scripts/ensure-mpi.sh installs it when missing.
build-mpi: mpi-deps
	$(GO) build -tags mpi -o $(BIN)/rankrun-mpi ./cmd/rankrun

mpi-deps:
	@scripts/ensure-mpi.sh

run: build
	$(BIN)/rankrun run --ctx tp=1 --gen tp=4 --requests 64 --checked

test: test-go test-mpi

# -p 1: one test package at a time. Multi-rank tests run many goroutine
# ranks under the race detector; on a 2-core machine, two such packages at
# once starve ranks long enough to trip their collective timeouts.
test-go:
	$(GO) test -race -count=1 -p 1 -timeout 15m ./...

# The MPI backend's conformance suite under mpirun (np 2, 4, TCP), the CLI
# under mpirun (np 5 equals in-process; SIGINT to mpirun gives one partial
# report; errors and refusals), scenarios under mpirun, and a rank
# frozen with SIGSTOP in the default mode (the job ends within the
# collective timeout, naming it).
test-mpi: mpi-deps
	@scripts/test-mpi.sh
	@scripts/test-mpi-cli.sh
	@scripts/test-cli-mpi.sh
	@if [ -x scripts/test-mpi-scenarios.sh ]; then scripts/test-mpi-scenarios.sh; else echo "test-mpi: scripts/test-mpi-scenarios.sh missing" >&2; exit 1; fi
	@scripts/test-mpi-freeze.sh

# 1,000,000 requests in-process and under mpirun, each ending with its
# report; report size and peak memory against a 100,000-request run (slow:
# tens of minutes on 2 cores; not part of make test).
test-scale: mpi-deps
	@scripts/test-cli-scale.sh

bench: mpi-deps
	@scripts/bench.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if pkg-config --exists ompi; then $(GO) vet -tags mpi ./...; else echo "lint: Open MPI missing, skipped go vet -tags mpi (make mpi-deps installs it)"; fi

fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

soak:
	$(GO) test -race -count=1 -timeout 60m -run 'Matrix' ./tests/multirank/ -args -soak

clean:
	rm -rf $(BIN)
