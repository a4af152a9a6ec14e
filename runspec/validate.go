package runspec

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
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
func (s *Spec) checkFlags() error {
	if s.Unchecked && s.checkedSet && s.Checked {
		return errorf("--checked and --unchecked: give one (checked is the default)")
	}
	for _, d := range []struct {
		flag   string
		v      time.Duration
		zeroOK bool // 0 has a meaning, said in -h
	}{
		{"prefill-per-token", s.PrefillPerToken, true}, {"decode-per-step", s.DecodePerStep, true}, {"msg-jitter", s.MsgJitter, true},
		{"sender-wait-slice", s.SenderWaitSlice, false}, {"gen-poll-interval", s.GenPollInterval, false}, {"transfer-timeout", s.TransferTimeout, false},
		{"idle-tick", s.IdleTick, false}, {"stall-timeout", s.StallTimeout, false}, {"timeout", s.Timeout, false},
		{"collective-timeout", s.CollectiveTimeout, false},
	} {
		switch {
		case d.v < 0 && d.zeroOK:
			return errorf("--%s %v: must not be negative (0: none)", d.flag, d.v)
		case d.v <= 0 && !d.zeroOK:
			return errorf("--%s %v: must be positive", d.flag, d.v)
		}
	}
	for _, c := range []struct {
		flag string
		v    int
	}{
		{"layers", s.Layers}, {"kv-heads", s.KVHeads}, {"head-dim", s.HeadDim}, {"tokens-per-block", s.TokensPerBlock}, {"elem-bytes", s.ElemBytes},
		{"requests", s.Requests}, {"input", s.Input}, {"output", s.Output}, {"ctx-blocks", s.CtxBlocks}, {"gen-blocks", s.GenBlocks},
		{"pct-depth", s.PCTDepth},
	} {
		if c.v < 1 {
			return errorf("--%s %d: must be at least 1", c.flag, c.v)
		}
	}
	if err := CheckModelFlags(topology.Model{Layers: s.Layers, KVHeads: s.KVHeads, HeadDim: s.HeadDim, TokensPerBlock: s.TokensPerBlock, ElemBytes: s.ElemBytes}); err != nil {
		return err
	}
	for _, c := range []struct {
		flag string
		v    int
	}{{"max-batch", s.MaxBatch}, {"max-tokens", s.MaxTokens}} {
		if c.v < 0 {
			return errorf("--%s %d: must not be negative (0: no limit)", c.flag, c.v)
		}
	}
	if s.Chunked && s.MaxTokens == 0 {
		return errorf("--chunked with --max-tokens 0: chunked prefill needs a token budget for its chunks (--max-tokens N, N >= 1)")
	}
	if !(s.InputJitter >= 0 && s.InputJitter < 1) { // NaN and Inf too
		return errorf("--input-jitter %v: must be a number in [0, 1)", s.InputJitter)
	}
	if _, err := sim.ParseStrategy(s.Strategy); err != nil { // on every backend: a typo is a typo
		return errorf("--strategy: %v", err)
	}
	if s.Transfer != "async" && s.Transfer != "sync" {
		return errorf("--transfer %q: must be async or sync", s.Transfer)
	}
	if strings.Contains(s.Arrival, ",") {
		return errorf("--arrival %q: one pattern per run (burst, rate=R, poisson=R, closed=C or trace=FILE[:from=D][:span=D][:scale=K][:poisson=R]); rankrun sweep takes several", s.Arrival)
	}
	return nil
}

// checkSize refuses a world that the backend cannot run, and pools that
// the host cannot hold, before anything is allocated.
func (s *Spec) checkSize(backend string, c *executor.Config) error {
	limit := map[string]int{"local": local.MaxRanks, "sim": sim.MaxRanks}[backend]
	if limit > 0 && c.Ranks() > limit {
		more := fmt.Sprintf("the sim backend up to %d; or run under mpirun", sim.MaxRanks)
		if backend == "sim" || limit >= sim.MaxRanks {
			more = "or run under mpirun"
		}
		return errorf("--ctx %s + --gen %s: %d ranks, but the %s backend runs at most %d in one process (%s)",
			c.Ctx, c.Gen, c.Ranks(), backend, limit, more)
	}
	var inProcess int64
	for _, side := range []struct {
		flag   string
		l      topology.Layout
		blocks int
	}{{"--ctx-blocks", c.Ctx, c.CtxBlocks}, {"--gen-blocks", c.Gen, c.GenBlocks}} {
		sh, err := side.l.Shard(c.Model, 0)
		if err != nil {
			return errorf("%s: %v", side.flag, err)
		}
		if int64(side.blocks) > kvpool.MaxPoolBytes/int64(sh.BlockBytes()) {
			return errorf("%s %d: with %d-byte blocks a pool is above the %s limit per rank", side.flag, side.blocks,
				sh.BlockBytes(), units.Bytes(kvpool.MaxPoolBytes))
		}
		per := int64(side.blocks) * int64(sh.BlockBytes())
		if mem := s.hostMemory(); mem > 0 && per > mem {
			return errorf("%s %d: a pool of %s per rank, more than this host's %s of memory %s", side.flag, side.blocks,
				units.Bytes(per), units.Bytes(mem), smallerPools)
		}
		inProcess += per * int64(side.l.Ranks())
	}
	if mem := s.hostMemory(); backend != "mpi" && mem > 0 && inProcess > mem {
		return errorf("--ctx-blocks %d, --gen-blocks %d: the %d ranks' pools take %s in this process, more than this host's %s of memory %s",
			c.CtxBlocks, c.GenBlocks, c.Ranks(), units.Bytes(inProcess), units.Bytes(mem), smallerPools)
	}
	return nil
}

// smallerPools ends a refusal of pools too big for the host.
const smallerPools = "(give smaller pools; with --model, --backend sim samples the KV heads to fit unless --kv-sample is given)"

// hostMemory is the memory the run's in-process pools may use: HostMemory,
// else this host's physical memory (0: unknown, no bound).
func (s *Spec) hostMemory() int64 {
	switch {
	case s.HostMemory > 0:
		return s.HostMemory
	case s.HostMemory < 0:
		return 0
	}
	return thisHost()
}

// thisHost is the host's physical memory, read once (0: unknown).
var thisHost = sync.OnceValue(readHostMemory)

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

// simOnlyFlags are the flags only the simulation backend reads.
var simOnlyFlags = []string{"strategy", "pct-depth", "msg-jitter", "early-arrivals", "schedule-seed"}

// NoteSimOnly writes one note line to w for each simulation-only flag the
// command line set when backend is not sim: the run goes on, and the user
// learns that the flag changed nothing.
func (s *Spec) NoteSimOnly(backend string, w io.Writer) {
	if backend == "sim" {
		return
	}
	for _, name := range simOnlyFlags {
		if s.Set[name] {
			fmt.Fprintf(w, "rankrun: note: --%s applies to --backend sim only; this %s run ignores it\n", name, backend)
		}
	}
}

// CheckModelFlags refuses the model flags (--layers, --kv-heads,
// --head-dim, --tokens-per-block, --elem-bytes) by their names: each in
// [1, topology.MaxModelField], and the KV block they make at most
// topology.MaxBlockBytes (the model's own check names Go fields).
func CheckModelFlags(m topology.Model) error {
	for _, c := range []struct {
		flag string
		v    int
	}{{"layers", m.Layers}, {"kv-heads", m.KVHeads}, {"head-dim", m.HeadDim}, {"tokens-per-block", m.TokensPerBlock}, {"elem-bytes", m.ElemBytes}} {
		if c.v < 1 || c.v > topology.MaxModelField {
			return errorf("--%s %d: must be in [1, %d]", c.flag, c.v, topology.MaxModelField)
		}
	}
	if err := m.Validate(); err != nil {
		return errorf("--layers x --kv-heads x --tokens-per-block x --head-dim x --elem-bytes: %v", err)
	}
	return nil
}
