package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rankrun/rankrun/internal/perfsuite"
	"github.com/stretchr/testify/require"
)

// rankrun bench away from the repository root: a --raw folder that does
// not exist is refused up front (it used to carry on with every raw row
// missing), and the committed perf figures are the ones built in.
func TestBenchAwayFromTheRepository(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repoRoot, perfsuite.File))
	require.NoError(t, err)
	require.Equal(t, string(want), string(perfFileBuiltIn), "the copy built in is the committed file")
	wantFigs, _, err := perfsuite.Committed{Path: filepath.Join(repoRoot, perfsuite.File)}.Parse()
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	code, _, errOut := cli(t, "bench", "--raw", "/nonexistent", "--json", "")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--raw /nonexistent: not a folder of raw results")
	code, _, errOut = cli(t, "bench", "--json", "")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--raw out/raw: not a folder of raw results")
	figs, _, err := perfsuite.Committed{Path: perfsuite.File, BuiltIn: perfFileBuiltIn}.Parse()
	require.NoError(t, err)
	require.NotEmpty(t, figs)
	require.Equal(t, wantFigs, figs, "away from the repository, the figures built in")
	_, _, err = perfsuite.Committed{Path: "/nonexistent/perf.txt", BuiltIn: perfFileBuiltIn}.Parse()
	require.Error(t, err, "a path the user gave is read as given")
}
