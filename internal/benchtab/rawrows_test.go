package benchtab

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cost model's row is the closed form over every step priced, met
// when it is 20 times faster or more; a raw file without both is missing.
func TestCostmodelBenchRow(t *testing.T) {
	dir := t.TempDir()
	raw := "goos: linux\nBenchmarkRun/closed-form-2   5   2332898 ns/op   245696 B/op   3405 allocs/op\n" +
		"BenchmarkRun/stepwise-2   5   532334790 ns/op   120656984 B/op   341434 allocs/op\nok\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "costmodel.txt"), []byte(raw), 0o644))
	var rows []Row
	require.NoError(t, costmodelRows(dir, func(r Row) { rows = append(rows, r) }))
	require.Len(t, rows, 1)
	assert.InDelta(t, 2332898.0/532334790, rows[0].Ratio, 1e-12)
	require.NotNil(t, rows[0].Met)
	assert.True(t, *rows[0].Met)
	require.NotNil(t, rows[0].Allocs)
	assert.Equal(t, 3405.0, *rows[0].Allocs)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "costmodel.txt"), []byte("BenchmarkRun/closed-form-2 5 1 ns/op\n"), 0o644))
	assert.ErrorContains(t, costmodelRows(dir, func(Row) {}), "no Run/closed-form and Run/stepwise")
}
