# rankrun: make run (the main job, in-process) and make test (the whole suite).
GO      ?= go
# go-nvml's vendored header prints ~150 deprecation warnings on a cold build;
# only builds with -tags nvml (bin/rankrun's devices command) compile it.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
BIN     := bin
FUZZTIME ?= 20s

.PHONY: all build build-mpi run test test-go test-explore test-sim-scale test-memory test-docs test-perf perf-update test-examples mutate test-mpi test-multinode test-scale bench lint fuzz soak mpi-deps clean

all: build

# bin/rankrun carries the real NVML for its devices command (-tags nvml);
# a plain go build is pure Go and its devices command says how to rebuild.
build:
	$(GO) build ./...
	$(GO) build -tags nvml -o $(BIN)/rankrun ./cmd/rankrun

# The MPI build needs Open MPI; scripts/ensure-mpi.sh installs it when missing.
build-mpi: mpi-deps
	$(GO) build -tags mpi -o $(BIN)/rankrun-mpi ./cmd/rankrun

mpi-deps:
	@scripts/ensure-mpi.sh

run: build
	$(BIN)/rankrun run --ctx tp=1 --gen tp=4 --requests 64

test: test-go test-explore test-sim-scale test-memory test-docs test-perf test-examples test-mpi test-multinode

# Every package under -race, one package at a time, its test binaries built
# first all at once (scripts/test-go.sh says why); RACE_FREE packages without
# -race (they start no goroutine; their TestStartsNoGoroutine holds it);
# gpu with the real NVML; CGO_ENABLED=0 builds every package but the MPI
# binding and NVML. Any failing fails test-go.
RACE_FREE := github.com/rankrun/rankrun/topology
test-go:
	@GO="$(GO)" RACE_FREE="$(RACE_FREE)" scripts/test-go.sh

# Schedule search over the generated layout space (explore.Space: every
# layout family, each side up to 8 ranks, async and sync, with and without
# each fault kind), random and PCT schedules, in simulated time. Without
# -race: it runs the same code as test-go, ~10x more schedules per minute.
# A failure prints the line that replays it. make soak runs a larger one.
EXPLORE_BUDGET ?= 3m
EXPLORE_SEEDS  ?= 8
test-explore:
	$(GO) test -count=1 -timeout 20m -run 'TestExploreLayoutSpace' ./explore/ \
		-explore.budget $(EXPLORE_BUDGET) -explore.seeds $(EXPLORE_SEEDS) -v

# Scenarios too large for the race detector, in simulated time: their
# verdicts come from virtual time alone, however long the host takes.
test-sim-scale: build
	$(BIN)/rankrun scenario --backend sim tests/multirank/testdata/scale/*.txt

# Peak RSS against stated budgets (tests/memory's package doc has the
# table): a run's trace and records stream to their files, and a 2048-rank
# simulation fits its budget.
test-memory:
	@PATH="$$($(GO) env GOROOT)/bin:$$PATH" $(GO) test -tags memory -count=1 -timeout 30m ./tests/memory

# Every rankrun command line of the README and docs/, as written (a smaller size
# where cmd/rankrun/readme_test.go says so), without -race: the sweep and
# the 70B run take minutes under it.
test-docs:
	$(GO) test -count=1 -run '^TestREADMECommands$$' ./cmd/rankrun -v

# Virtual-time figures, without the race detector. The perf-regression
# suite: internal/perfsuite's standard runs in simulation (the seeds'
# shapes, the README's examples, a layout per family) must give exactly
# the virtual-time figures committed in cmd/rankrun/testdata/perf-figures.txt;
# it prints each that moved, old and new. make perf-update rewrites the
# file (review its diff). With it, the tests that assert the model's
# figures: the seeds' tables and a goodput search over an hour of virtual
# time (in simulation, where one rank runs at a time), and rankrun
# validate's rows (closed form, no goroutine). Each skips itself under
# test-go's -race, which makes them 5 to 10 times slower; their code runs
# under it in other tests (withoutRace in cmd/rankrun/race_test.go, whose
# test checks this list).
FIGURE_TESTS := TestPerfFigures|TestSeed000Table|TestBlocking15139Cost|TestGoodputLowRatesOutlastTheDefaultDeadline|TestValidatePrintsEveryRow
test-perf:
	$(GO) test -count=1 -run '^($(FIGURE_TESTS))$$' ./cmd/rankrun

perf-update:
	$(GO) test -count=1 -run '^TestPerfFigures$$' ./cmd/rankrun -perf.update

# The suite must kill every named mutant of tools/mutate's catalogue (each
# applied alone to a scratch copy; the test that killed it last runs
# alone first (tools/mutate/killers.txt), then, unless that killed it with
# the suite still compiling and vetting, the fast sim and in-process
# packages run against it, stopping at the first failure). The unmutated copy runs
# the same suites first and must pass; a mutant is killed only by a named
# test that fails on it and passes unmutated. Prints mutant, verdict,
# seconds, killing test; a survivor, a timeout, a mutant that does not
# compile and one whose failure names no such test each fail the run.
# The MPI binding's mutants run the comm/mpi tests under real mpirun.
mutate: mpi-deps
	$(GO) run ./tools/mutate

# Every program under examples/ with go run (in-process and RANKRUN_BACKEND=sim),
# as its test in simulation, and under mpirun -np 4; seedpoll's replay line
# reproduces the bug the explorer found.
test-examples:
	@scripts/test-examples.sh

# The MPI backend's conformance suite under mpirun (np 2, 4, TCP), then
# tests/mpicli (go test -tags mpirun): the CLI under mpirun (np 5 equals
# in-process; SIGINT to mpirun gives one partial report; errors and
# refusals), every scenario case under mpirun (the hand-written ones and the
# generated adp family; MPI_ADP=0 skips the family), an exit fault that
# ends the job naming its rank, and a rank frozen with SIGSTOP, unchecked
# and checked (the job ends within the collective timeout plus a slack,
# naming it; FREEZE_RANKS, FREEZE_MODES, COLL_TIMEOUT, FREEZE_SLACK narrow
# or loosen it). tests/mpicli's test files say what each checks.
test-mpi: mpi-deps
	@scripts/test-mpi.sh
	@echo "test-mpi: the CLI, the scenarios and a frozen rank under mpirun (go test -tags mpirun ./tests/mpicli)"
	@PATH="$$($(GO) env GOROOT)/bin:$$PATH" $(GO) test -tags mpirun -count=1 -timeout 40m ./tests/mpicli

# mpirun across hosts: network namespaces as hosts joined by a veth pair, a
# launch agent that enters them instead of ssh, and a link cut mid-run. Needs
# root (ip netns add); elsewhere it says why it skipped.
test-multinode:
	@scripts/test-multinode.sh

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
	$(GO) vet -tags nvml ./gpu ./cmd/rankrun
	$(GO) vet -tags mpirun ./tests/mpicli
	$(GO) vet -tags memory ./tests/memory
	@if pkg-config --exists ompi; then $(GO) vet -tags mpi ./...; else echo "lint: Open MPI missing, skipped go vet -tags mpi (make mpi-deps installs it)"; fi

fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

soak:
	$(GO) test -race -count=1 -timeout 60m -run 'Matrix' ./tests/multirank/ -args -soak
	$(GO) test -count=1 -timeout 90m -run 'TestExploreLayoutSpace' ./explore/ \
		-explore.budget 40m -explore.seeds 100 -explore.ranks 16 -explore.seed $$(date +%s) -v

clean:
	rm -rf $(BIN)
