package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The repository root, from this package's directory.
const repoRoot = "../.."

// Every file `rankrun scenario -h` names exists, it points to the format
// reference, and boolean flags are shown without an argument.
func TestScenarioHelp(t *testing.T) {
	code, _, help := cli(t, "scenario", "-h")
	require.Equal(t, 0, code)
	paths := regexp.MustCompile(`[\w./-]+\.(?:txt|md)\b`).FindAllString(help, -1)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		_, err := os.Stat(filepath.Join(repoRoot, p))
		assert.NoError(t, err, "scenario -h names %s", p)
	}
	assert.Contains(t, help, "scenario/FORMAT.md")
	assert.Contains(t, help, "two spaces or a tab")
	for _, b := range []string{"print-run", "with-replay", "replay-on", "v"} {
		assert.Regexp(t, `(?m)^  -`+b+`[\n\t]`, help, "-%s is a boolean: no argument shown", b)
	}
	ref, err := os.ReadFile(filepath.Join(repoRoot, "scenario/FORMAT.md"))
	require.NoError(t, err)
	assert.Contains(t, string(ref), "two or more spaces or a\n  tab")
}

// `rankrun foo`, `rankrun -h` and the README list every command.
func TestEveryCommandListed(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	_, _, unknown := cli(t, "foo")
	_, top, _ := cli(t, "-h")
	for _, c := range []string{"run", "sweep", "scenario", "explore", "devices", "bench"} {
		assert.Contains(t, unknown, c, "rankrun foo")
		assert.Contains(t, top, "rankrun "+c, "rankrun -h")
		assert.Regexp(t, `(?m)^rankrun `+c+` `, string(readme), "README's command list")
		code, _, errOut := cli(t, c, "-h")
		assert.Equal(t, 0, code, "%s -h: %s", c, errOut)
		assert.True(t, strings.HasPrefix(errOut, "Usage: rankrun "+c), "%s -h", c)
	}
}
