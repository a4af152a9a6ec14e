package scenario_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/scenario"
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
