package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// rankrun bench away from the repository root: a --raw folder that does
// not exist is refused up front (it used to carry on with every raw row
// missing), and the committed perf figures are the ones built in.
func TestBenchAwayFromTheRepository(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repoRoot, perfFile))
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	code, _, errOut := cli(t, "bench", "--raw", "/nonexistent", "--json", "")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--raw /nonexistent: not a folder of raw results")
	code, _, errOut = cli(t, "bench", "--json", "")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--raw out/raw: not a folder of raw results")
	got, err := readPerfBytes(perfFile)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	figs, _, err := readPerfFile(perfFile)
	require.NoError(t, err)
	require.NotEmpty(t, figs)
	_, err = readPerfBytes("/nonexistent/perf.txt")
	require.Error(t, err, "a path the user gave is read as given")
}
