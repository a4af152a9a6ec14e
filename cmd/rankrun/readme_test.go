package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeCommand is how TestREADMECommands runs one of the README's rankrun
// command lines: with extra flags after it (a later flag wins, so these
// shrink a size) and the exit and output it must give. Paths the command
// would write are redirected to a temporary directory.
type readmeCommand struct {
	shrink []string // flags appended: a smaller size, where the README says one is used
	code   int
	want   string // in stdout (or, for explore, stderr)
}

// readmeCommands holds every rankrun command line of the README's code
// blocks, keyed by its first words up to the first flag's value; a README
// line without an entry fails the test, so a new example is run too.
var readmeCommands = map[string]readmeCommand{
	"rankrun run --backend sim --ctx tp=16,pp=2 --gen tp=32": {shrink: []string{"--requests", "40"}, want: "errors                            none"},
	"rankrun run --backend sim --seed 7 --replay unclamped-poll": {shrink: []string{"--requests", "8"},
		want: "note: --replay unclamped-poll fails no run; its bug shows as time"},
	"rankrun scenario --backend sim tests/multirank/testdata/*.txt": {want: "runs of"},
	"rankrun explore --ctx tp=1 --gen tp=2,dp=2,adp --replay adp-early-outcome": {shrink: []string{"--seeds", "3"}, code: 1,
		want: "smallest"},
	"rankrun explore --ctx tp=2 --gen tp=2 --strategy pct": {shrink: []string{"--budget", "2s"}, want: "no failure"},
	"rankrun run --backend sim --model llama-3-70b --hardware h100 --ctx tp=4 --gen tp=4": {shrink: []string{"--requests", "8", "--kv-sample", "32"},
		want: "errors                            none"},
	"rankrun sweep --backend sim --model llama-3-70b --hardware h100 --gpus 8": {shrink: []string{"--requests", "4", "--arrival", "poisson=4"},
		want: "best placement for 8 GPUs"},
}

// readmeLines returns the rankrun command lines of the README's code
// blocks (continuations joined), leaving out the command list.
func readmeLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	var out []string
	in := false
	cont := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in && line == "```"
			continue
		}
		if !in {
			continue
		}
		if cont != "" {
			line = cont + " " + strings.TrimSpace(line)
			cont = ""
		}
		if !strings.HasPrefix(line, "rankrun ") || strings.Contains(line, "[flags]") || strings.Contains(line, "FILE...") ||
			strings.HasPrefix(line, "rankrun version") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		out = append(out, strings.Join(strings.Fields(line), " "))
	}
	return out
}

// Every rankrun command in the README runs as written (a smaller size
// where readmeCommands says so, which the README names), with the exit
// and the output it describes.
//
// Without the race detector only (make test-docs): the sweep and the 70B
// runs take minutes under it, and their code is the same as the race
// runs of the other tests.
func TestREADMECommands(t *testing.T) {
	if raceEnabled {
		t.Skip("run without -race, by make test-docs")
	}
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
			tmp := t.TempDir()
			var args []string
			for _, a := range strings.Fields(line)[1:] {
				switch {
				case strings.HasPrefix(a, "docs/") || strings.HasSuffix(a, ".png") || strings.HasSuffix(a, ".svg"):
					a = filepath.Join(tmp, filepath.Base(a)) // an output: not into the repository
				case strings.Contains(a, "*"):
					m, err := filepath.Glob(filepath.Join(repoRoot, a))
					require.NoError(t, err)
					require.NotEmpty(t, m, a)
					args = append(args, m[0]) // one file of the glob: TestScenarios runs them all
					continue
				}
				args = append(args, a)
			}
			code, out, errOut := cli(t, append(args, c.shrink...)...)
			require.Equal(t, c.code, code, "%s %s\nstdout:\n%s\nstderr:\n%s", line, strings.Join(c.shrink, " "), out, errOut)
			assert.Contains(t, out+errOut, c.want)
		})
	}
	for k := range readmeCommands {
		assert.True(t, seen[k], "readmeCommands has %q, which the README no longer shows", k)
	}
}
