package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeCommand is how TestREADMECommands runs one of the README's rankrun
// command lines: with extra flags after it (a later flag wins, so these
// shrink a size) and the exit and output it must give. Paths the command
// would write are redirected to a temporary directory. skip names the
// test that runs a line this one cannot (under mpirun).
type readmeCommand struct {
	shrink []string // flag, value pairs: each replaces the flag's value, or is appended (a smaller size)
	code   int
	want   *regexp.Regexp // in stdout (or, for explore, stderr)
	skip   string
}

// readmeCommands holds every rankrun command line of the README's code
// blocks, keyed by its first words; a README line without an entry fails
// the test, so a new example is run too.
var readmeCommands = map[string]readmeCommand{
	"rankrun run --backend sim --ctx tp=16,pp=2 --gen tp=32": {shrink: []string{"--requests", "40"},
		want: regexp.MustCompile(`(?m)^requests +40 completed, 0 failed[^\n]*\n(?s:.*)^errors +none$`)},
	"rankrun run --backend sim --seed 7 --replay unclamped-poll": {shrink: []string{"--requests", "8"},
		want: regexp.MustCompile(`note: --replay unclamped-poll fails no run; its bug shows as time(?s:.*)idle host step \(ctx\) +p50 \S+ +p90 1000ms`)},
	"rankrun scenario --backend sim tests/multirank/testdata/*.txt": {want: regexp.MustCompile(`(?m)^1 runs of 1 scenarios, 1 passed, 0 failed$`)},
	"rankrun explore --ctx tp=1 --gen tp=2,dp=2,adp --replay adp-early-outcome": {shrink: []string{"--seeds", "3"}, code: 1,
		want: regexp.MustCompile(`smallest`)},
	"rankrun explore --ctx tp=2 --gen tp=2 --strategy pct": {shrink: []string{"--budget", "2s"},
		want: regexp.MustCompile(`explore: no failure in \d+ schedules \(pct strategy`)},
	// As written (the README's cost-model run).
	"rankrun run --backend sim --model llama-3-70b --hardware h100 --ctx tp=4 --gen tp=4": {
		want: regexp.MustCompile(`(?m)^requests +64 completed, 0 failed(?s:.*)^errors +none$`)},
	"rankrun sweep --backend sim --model llama-3-70b --hardware h100 --gpus 8": {shrink: []string{"--requests", "4", "--arrival", "poisson=4"},
		want: regexp.MustCompile(`best placement for 8 GPUs: \S+/\S+ \(\d GPUs\): goodput 4 requests/s`)},
	"mpirun -np 5 --oversubscribe bin/rankrun-mpi run --ctx tp=1 --gen tp=4": {skip: "tests/mpicli (make test-mpi) runs it under mpirun"},
	"rankrun run --backend sim --ctx tp=2 --gen tp=2 --requests 24 --input 64 --output 2 --arrival closed=8 --ctx-blocks 64 --gen-blocks 64 --fault shrink-pool@ctx:1,blocks=8 --replay local-admission-gate": {
		code: 1, want: regexp.MustCompile(`(?m)^requests +0 completed`)},
	"rankrun run --backend sim --model llama-3-70b --hardware h100 --ctx tp=4 --gen tp=4 --arrival trace=traces/AzureLLMInferenceTrace_conv.csv --requests 200": {
		want: regexp.MustCompile(`the first 200 of the trace, at the recorded times x1, over 61\.3 s; input p50 890 p99 4088, output p50 183 p99 520 tokens(?s:.*)requests +200 completed, 0 failed`)},
	// Shrunk to one pair and one 1-minute window; the goodput shows.
	"rankrun sweep --backend sim --model llama-3-70b --hardware h100 --pair tp=4/tp=4 --pair tp=2,dp=2/tp=4 --pair tp=8/tp=8 --arrival trace=": {
		shrink: []string{"--pair", "tp=8/tp=8", "--arrival", "trace=traces/AzureLLMInferenceTrace_conv.csv:span=1m,trace=traces/AzureLLMInferenceTrace_conv.csv:span=1m:scale=2"},
		want:   regexp.MustCompile(`goodput per GPU(?s:.*)tp=8/tp=8 +16 +\d`)},
	"rankrun analyze diag/testdata/pytorch/mismatch": {code: 1, want: regexp.MustCompile(`first mismatch: "0" #7 was entered differently`)},
	"rankrun throughput --model llama-3.1-405b --precision fp8 --hardware h200 --layout tp=8 --layout pp=8": {
		want: regexp.MustCompile(`(?m)^tp=8 +8 +1180\.0 kv +390\.29 +3023 +378\n^pp=8 +8 +1093\.0 kv +289\.34 +3778 +472$`)},
	"rankrun throughput --model llama-3-8b --precision fp8 --hardware h100 --layout tp=1 --in 128 --out 4096 --requests 1500 --trtllm-bench": {
		want: regexp.MustCompile(`(?m)^tp=1 +1 +231\.0 run +16\.29 +13153 +13153\n^tp=1: max_batch=256 max_tokens=2048 chunked=false overlap=true$`)},
}

// userDocs are the README and the guides under docs/ it links to: every
// rankrun command line in them runs (TestREADMECommands).
func userDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	// The design document shows no command; its package graph's
	// "cmd/rankrun -> ..." is not one.
	docs = slices.DeleteFunc(docs, func(f string) bool { return filepath.Base(f) == "DESIGN.md" })
	return append([]string{filepath.Join(repoRoot, "README.md")}, docs...)
}

// readmeLines returns the command lines of the user docs' plain code
// blocks (continuations joined) that run rankrun, leaving out the command
// list and printed output.
func readmeLines(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range userDocs(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		out = append(out, docLines(string(b))...)
	}
	return out
}

func docLines(doc string) []string {
	var out []string
	fence, lang := false, ""
	cont := ""
	for _, line := range strings.Split(doc, "\n") {
		if rest, ok := strings.CutPrefix(line, "```"); ok {
			fence, lang = !fence, strings.TrimSpace(rest)
			continue
		}
		if !fence || lang != "" && lang != "sh" && lang != "bash" {
			continue
		}
		if cont != "" {
			line = cont + " " + strings.TrimSpace(line)
			cont = ""
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		runs := len(f) > 0 && (f[0] == "rankrun" || slices.ContainsFunc(f, func(w string) bool { return strings.HasSuffix(w, "/rankrun") || strings.HasSuffix(w, "/rankrun-mpi") }))
		if !runs || strings.Contains(line, "[flags]") || strings.Contains(line, "FILE...") || strings.Contains(line, " DIR ") || f[0] == "rankrun" && f[1] == "version" {
			continue // not a command line, or the command list
		}
		out = append(out, strings.Join(f, " "))
	}
	return out
}

// Every rankrun command in the README and docs/ runs as written (a smaller size
// where readmeCommands says so, which the README names), with the exit
// and the output it describes.
//
// Without the race detector only (make test-docs): the sweep and the 70B
// runs take minutes under it, and their code is the same as the race
// runs of the other tests.
func TestREADMECommands(t *testing.T) {
	withoutRace(t, "test-docs")
	lines := readmeLines(t)
	require.GreaterOrEqual(t, len(lines), len(readmeCommands))
	seen := map[string]bool{}
	for _, line := range lines {
		key := ""
		for k := range readmeCommands {
			if strings.HasPrefix(line, k) && len(k) > len(key) {
				key = k
			}
		}
		require.NotEmpty(t, key, "the README's %q has no entry in readmeCommands: add how to run it", line)
		seen[key] = true
		c := readmeCommands[key]
		t.Run(strings.Join(strings.Fields(line)[:3], " "), func(t *testing.T) {
			if c.skip != "" {
				t.Skip(c.skip)
			}
			tmp := t.TempDir()
			var args []string
			for _, a := range strings.Fields(line)[1:] {
				switch {
				case strings.HasPrefix(a, "docs/") || strings.HasSuffix(a, ".png") || strings.HasSuffix(a, ".svg") || a == "dumps":
					a = filepath.Join(tmp, filepath.Base(a)) // an output: not into the repository
				case strings.HasPrefix(a, "diag/testdata/"):
					a = filepath.Join(repoRoot, a) // an input of the repository
				case strings.Contains(a, "*"):
					m, err := filepath.Glob(filepath.Join(repoRoot, a))
					require.NoError(t, err)
					require.NotEmpty(t, m, a)
					args = append(args, m[0]) // one file of the glob: TestScenarios runs them all
					continue
				}
				args = append(args, a)
			}
			for i := 0; i+1 < len(c.shrink); i += 2 {
				if j := slices.Index(args, c.shrink[i]); j >= 0 && j+1 < len(args) {
					args[j+1] = c.shrink[i+1] // a repeatable flag (sweep --arrival) would add, not replace
				} else {
					args = append(args, c.shrink[i], c.shrink[i+1])
				}
			}
			for i, a := range args { // the shipped traces: inputs of the repository
				args[i] = strings.ReplaceAll(a, "trace=traces/", "trace="+filepath.Join(repoRoot, "traces")+"/")
			}
			code, out, errOut := cli(t, args...)
			require.Equal(t, c.code, code, "%s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, errOut)
			assert.Regexp(t, c.want, out+errOut)
		})
	}
	for k := range readmeCommands {
		assert.True(t, seen[k], "readmeCommands has %q, which the README no longer shows", k)
	}
}
