package scenario_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FORMAT.md is the format's one reference: every key, replay and named
// error the parser takes is in it.
func TestFormatDocIsComplete(t *testing.T) {
	b, err := os.ReadFile("FORMAT.md")
	require.NoError(t, err)
	doc := string(b)
	var missing []string
	for _, k := range scenario.Keys() {
		if !strings.Contains(doc, "`"+k+"`") {
			missing = append(missing, "key "+k)
		}
	}
	for _, r := range executor.Replays {
		if !strings.Contains(doc, "`"+string(r)+"`") {
			missing = append(missing, "replay "+string(r))
		}
	}
	for n := range scenario.NamedErrors {
		if !strings.Contains(doc, "`"+n+"`") {
			missing = append(missing, "named error "+n)
		}
	}
	documented := func(f string) bool { // as itself, or per side, or a distribution's base and suffix
		if strings.Contains(doc, "`"+f+"`") || strings.Contains(doc, "`"+strings.TrimPrefix(strings.TrimPrefix(f, "ctx-"), "gen-")+"`") {
			return true
		}
		for _, suf := range []string{"-p50", "-p90", "-p99", "-mean", "-max", "-n"} {
			if base, ok := strings.CutSuffix(f, suf); ok {
				return strings.Contains(doc, "`"+base+"`") && strings.Contains(doc, "`"+suf+"`")
			}
		}
		return false
	}
	for _, f := range scenario.Figures() {
		if !documented(f) {
			missing = append(missing, "figure "+f)
		}
	}
	require.Empty(t, missing, "FORMAT.md lacks them")
	require.NotContains(t, doc, "reads like the command line that reproduces it", "several defaults differ from the CLI's")
	require.True(t, strings.Contains(doc, "trace="), "the trace arrival")
}

// A trace arrival without requests: replays the whole window, as rankrun
// run without --requests does; with it, the window's first N.
func TestTraceScenarioRequests(t *testing.T) {
	const base = "name: x\nctx: tp=1\ngen: tp=1\nexpect: ok\narrival: trace=../traces/AzureLLMInferenceTrace_conv.csv:span=5s\n"
	s, err := scenario.Parse("x.txt", strings.NewReader(base))
	require.NoError(t, err)
	cfg, err := s.Config(false)
	require.NoError(t, err)
	require.Equal(t, 4, cfg.Workload.Requests, "the window's every row")
	require.NotContains(t, strings.Join(s.RunArgs(false), " "), "--requests")
	s, err = scenario.Parse("x.txt", strings.NewReader(base+"requests: 3\n"))
	require.NoError(t, err)
	cfg, err = s.Config(false)
	require.NoError(t, err)
	require.Equal(t, 3, cfg.Workload.Requests)
	require.Contains(t, strings.Join(s.RunArgs(false), " "), "--requests 3 --arrival trace=../traces/AzureLLMInferenceTrace_conv.csv:span=5s")
}

// A scenario's deadline is its own, a trace's too: the command line's
// default that grows with a trace's span applies only where --timeout is
// not given, and a scenario always gives it.
func TestTraceScenarioKeepsItsDeadline(t *testing.T) {
	s, err := scenario.Parse("x.txt", strings.NewReader("name: x\nctx: tp=1\ngen: tp=1\nexpect: ok\ntimeout: 7s\n"+
		"arrival: trace=../traces/AzureLLMInferenceTrace_conv.csv:span=5s\n"))
	require.NoError(t, err)
	sp := s.Spec(false)
	_, err = sp.Config()
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, sp.Timeout)
	require.Contains(t, strings.Join(s.RunArgs(false), " "), "--timeout 7s")
}

// The run a scenario describes is the command line's, with the
// scenario's own readings kept: a bound of 0 is the default (as the
// executor reads a zero), the pools are checked against the simulation's
// limits, not this host's memory (a scenario is a description that another
// host may run), and a routing built in Go keeps its groups.
func TestScenarioKeepsItsReadings(t *testing.T) {
	s, err := scenario.Parse("x.txt", strings.NewReader("name: x\nctx: tp=1\ngen: tp=1\nexpect: ok\n"+
		"sender-wait-slice: 0s  gen-poll-interval: 0s  transfer-timeout: 0s\nidle-tick: 0s  stall-timeout: 0s  collective-timeout: 0s\n"))
	require.NoError(t, err)
	cfg, err := s.Config(false)
	require.NoError(t, err)
	assert.Equal(t, transceiver.DefaultSenderWaitSlice, cfg.SenderWaitSlice)
	assert.Equal(t, transceiver.DefaultGenPollInterval, cfg.GenPollInterval)
	assert.Equal(t, transceiver.DefaultTransferTimeout, cfg.TransferTimeout)
	assert.Equal(t, executor.DefaultIdleTick, cfg.IdleTick)
	assert.Equal(t, executor.DefaultStallTimeout, cfg.StallTimeout)
	sc, err := s.SimConfig()
	require.NoError(t, err)
	assert.Equal(t, comm.DefaultCollectiveTimeout, sc.Timeout)

	// 60,000,000 blocks of 16 KiB a rank: 1.97 TB in all, more than any
	// test host holds, under the 1 TiB a pool may take.
	_, err = scenario.Parse("big.txt", strings.NewReader("name: big\nctx: tp=1\ngen: tp=1\nexpect: ok\nctx-blocks: 60000000\ngen-blocks: 60000000\n"))
	require.NoError(t, err, "a scenario parses whatever this host's memory")

	g := scenario.New("grouped")
	g.Ctx, g.Gen = "tp=1", "tp=2,ep=2"
	g.Routing = topology.Routing{Experts: 8, TopK: 2, Groups: 4, GroupsPerToken: 2}
	cfg, err = g.Config(false)
	require.NoError(t, err)
	assert.Equal(t, g.Routing, cfg.Routing, "the routing's groups reach the run")
}

// A run given as flags becomes a scenario with its synthetic routing:
// explore --experts E/K on a layout with ep.
func TestFromSpecKeepsTheRouting(t *testing.T) {
	sp, err := runspec.Parse([]string{"--ctx", "tp=1", "--gen", "tp=2,ep=2", "--experts", "8/2", "--requests", "4"})
	require.NoError(t, err)
	s, err := scenario.FromSpec("explore", sp, nil)
	require.NoError(t, err)
	assert.Equal(t, topology.Routing{Experts: 8, TopK: 2}, s.Routing)
	_, err = s.Config(false)
	require.NoError(t, err)
}
