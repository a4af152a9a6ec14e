package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/units"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/topology"
)

// One rule for every input: a bad value is a usage error (exit 2) of one
// line that names the flag and the rule. These checks run before the
// configuration is built, so no message names an internal field; the
// executor's own Validate stays as the backstop for library callers.

// checkFlags checks every count, duration and number flag by its name.
func (f *runFlags) checkFlags() error {
	if f.unchecked && f.checkedSet && f.checked {
		return usagef("--checked and --unchecked: give one (checked is the default)")
	}
	for _, d := range []struct {
		flag   string
		v      time.Duration
		zeroOK bool // 0 has a meaning, said in -h
	}{
		{"prefill-per-token", f.prefill, true}, {"decode-per-step", f.decode, true}, {"msg-jitter", f.msgJitter, true},
		{"sender-wait-slice", f.slice, false}, {"gen-poll-interval", f.genPoll, false}, {"transfer-timeout", f.xferTimeout, false},
		{"idle-tick", f.idleTick, false}, {"stall-timeout", f.stall, false}, {"timeout", f.timeout, false},
		{"collective-timeout", f.collTimeout, false},
	} {
		switch {
		case d.v < 0 && d.zeroOK:
			return usagef("--%s %v: must not be negative (0: none)", d.flag, d.v)
		case d.v <= 0 && !d.zeroOK:
			return usagef("--%s %v: must be positive", d.flag, d.v)
		}
	}
	for _, c := range []struct {
		flag string
		v    int
	}{
		{"layers", f.layers}, {"kv-heads", f.heads}, {"head-dim", f.headDim}, {"tokens-per-block", f.tpb}, {"elem-bytes", f.elem},
		{"requests", f.requests}, {"input", f.input}, {"output", f.output}, {"ctx-blocks", f.ctxBlocks}, {"gen-blocks", f.genBlocks},
		{"pct-depth", f.pctDepth},
	} {
		if c.v < 1 {
			return usagef("--%s %d: must be at least 1", c.flag, c.v)
		}
	}
	if err := checkModelFlags(topology.Model{Layers: f.layers, KVHeads: f.heads, HeadDim: f.headDim, TokensPerBlock: f.tpb, ElemBytes: f.elem}); err != nil {
		return err
	}
	for _, c := range []struct {
		flag string
		v    int
	}{{"max-batch", f.maxBatch}, {"max-tokens", f.maxTokens}} {
		if c.v < 0 {
			return usagef("--%s %d: must not be negative (0: no limit)", c.flag, c.v)
		}
	}
	if f.chunked && f.maxTokens == 0 {
		return usagef("--chunked with --max-tokens 0: chunked prefill needs a token budget for its chunks (--max-tokens N, N >= 1)")
	}
	if !(f.jitter >= 0 && f.jitter < 1) { // NaN and Inf too
		return usagef("--input-jitter %v: must be a number in [0, 1)", f.jitter)
	}
	if _, err := sim.ParseStrategy(f.strategy); err != nil { // on every backend: a typo is a typo
		return usagef("--strategy: %v", err)
	}
	if f.transfer != "async" && f.transfer != "sync" {
		return usagef("--transfer %q: must be async or sync", f.transfer)
	}
	if strings.Contains(f.arrival, ",") {
		return usagef("--arrival %q: one pattern per run (burst, rate=R, poisson=R, closed=C or trace=FILE[:from=D][:span=D][:scale=K][:poisson=R]); rankrun sweep takes several", f.arrival)
	}
	return nil
}

// checkSize refuses a world that the backend cannot run, and pools that
// the host cannot hold, before anything is allocated.
func checkSize(backend string, c *executor.Config) error {
	limit := map[string]int{"local": local.MaxRanks, "sim": sim.MaxRanks}[backend]
	if limit > 0 && c.Ranks() > limit {
		more := fmt.Sprintf("the sim backend up to %d; or run under mpirun", sim.MaxRanks)
		if backend == "sim" || limit >= sim.MaxRanks {
			more = "or run under mpirun"
		}
		return usagef("--ctx %s + --gen %s: %d ranks, but the %s backend runs at most %d in one process (%s)",
			c.Ctx, c.Gen, c.Ranks(), backend, limit, more)
	}
	var inProcess int64
	for _, side := range []struct {
		flag   string
		l      topology.Layout
		blocks int
	}{{"--ctx-blocks", c.Ctx, c.CtxBlocks}, {"--gen-blocks", c.Gen, c.GenBlocks}} {
		s, err := side.l.Shard(c.Model, 0)
		if err != nil {
			return usagef("%s: %v", side.flag, err)
		}
		if int64(side.blocks) > kvpool.MaxPoolBytes/int64(s.BlockBytes()) {
			return usagef("%s %d: with %d-byte blocks a pool is above the %s limit per rank", side.flag, side.blocks,
				s.BlockBytes(), units.Bytes(kvpool.MaxPoolBytes))
		}
		per := int64(side.blocks) * int64(s.BlockBytes())
		if mem := hostMemory(); mem > 0 && per > mem {
			return usagef("%s %d: a pool of %s per rank, more than this host's %s of memory %s", side.flag, side.blocks,
				units.Bytes(per), units.Bytes(mem), smallerPools)
		}
		inProcess += per * int64(side.l.Ranks())
	}
	if mem := hostMemory(); backend != "mpi" && mem > 0 && inProcess > mem {
		return usagef("--ctx-blocks %d, --gen-blocks %d: the %d ranks' pools take %s in this process, more than this host's %s of memory %s",
			c.CtxBlocks, c.GenBlocks, c.Ranks(), units.Bytes(inProcess), units.Bytes(mem), smallerPools)
	}
	return nil
}

// smallerPools ends a refusal of pools too big for the host.
const smallerPools = "(give smaller pools; with --model, --backend sim samples the KV heads to fit unless --kv-sample is given)"

// hostMemory is the host's physical memory in bytes (0: unknown); a
// variable so that tests can be a smaller host.
var hostMemory = readHostMemory

// readHostMemory reads MemTotal from /proc/meminfo (0: unknown).
func readHostMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil && kb > 0 && kb < math.MaxInt64/1024 {
				return kb * 1024
			}
		}
	}
	return 0
}

// peakRSS is this process's peak resident memory in bytes: Linux's VmHWM
// (/proc/self/status), else getrusage's ru_maxrss (KiB on Linux); 0 where
// unknown. VmHWM first: ru_maxrss of a process started by one that
// spawns with vfork (Go's os/exec) can be its parent's, taken over at exec.
func peakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 {
					return kb * 1024
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil || ru.Maxrss <= 0 {
		return 0
	}
	return ru.Maxrss * 1024
}

// simOnlyFlags are the flags only the simulation backend reads.
var simOnlyFlags = []string{"strategy", "pct-depth", "msg-jitter", "early-arrivals", "schedule-seed"}

// noteSimOnly writes one note line to w for each simulation-only flag the
// command line set when backend is not sim: the run goes on, and the user
// learns that the flag changed nothing.
func (f *runFlags) noteSimOnly(backend string, w io.Writer) {
	if backend == "sim" {
		return
	}
	for _, name := range simOnlyFlags {
		if f.set[name] {
			fmt.Fprintf(w, "rankrun: note: --%s applies to --backend sim only; this %s run ignores it\n", name, backend)
		}
	}
}

// checkModelFlags refuses the model flags (--layers, --kv-heads,
// --head-dim, --tokens-per-block, --elem-bytes) by their names: each in
// [1, topology.MaxModelField], and the KV block they make at most
// topology.MaxBlockBytes (the model's own check names Go fields).
func checkModelFlags(m topology.Model) error {
	for _, c := range []struct {
		flag string
		v    int
	}{{"layers", m.Layers}, {"kv-heads", m.KVHeads}, {"head-dim", m.HeadDim}, {"tokens-per-block", m.TokensPerBlock}, {"elem-bytes", m.ElemBytes}} {
		if c.v < 1 || c.v > topology.MaxModelField {
			return usagef("--%s %d: must be in [1, %d]", c.flag, c.v, topology.MaxModelField)
		}
	}
	if err := m.Validate(); err != nil {
		return usagef("--layers x --kv-heads x --tokens-per-block x --head-dim x --elem-bytes: %v", err)
	}
	return nil
}
