package perfsuite

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Figures compare exactly, or within a relative tolerance (a file of
// another architecture); NaN (no sample) equals only NaN. The file names
// the architecture that wrote it.
func TestSame(t *testing.T) {
	nan := math.NaN()
	assert.True(t, Same(1.5, 1.5, 0))
	assert.False(t, Same(4.391933671, 4.391933672, 0), "a nanosecond of 4 s")
	assert.False(t, Same(4.391933671, 4.391933672, 1e-12))
	assert.True(t, Same(1, 1+1e-9, 1e-6))
	assert.False(t, Same(1, 1.01, 1e-6))
	assert.True(t, Same(nan, nan, 0))
	assert.False(t, Same(nan, 0, 1e-6))
	assert.False(t, Same(0, nan, 1e-6))
	assert.Equal(t, "c f: 0 -> 5 (from 0)", Change{Key{"c", "f"}, 0, 5}.String())
	assert.Equal(t, "c f: 2 -> 1 (-50.00%)", Change{Key{"c", "f"}, 2, 1}.String())
	assert.Equal(t, "c f: 2 -> NaN (no sample on one side)", Change{Key{"c", "f"}, 2, nan}.String())

	path := filepath.Join(t.TempDir(), "figures.txt")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, Write(f, map[string][]Figure{"seed001-shape": {{"completed", 16}, {"idle_step_p90_ms", nan}}}))
	require.NoError(t, f.Close())
	assert.Equal(t, Arch(), Committed{Path: path}.Arch())
	assert.Zero(t, Committed{Path: path}.Tolerance(), "this architecture's file: exact")
	figs, _, err := Committed{Path: path}.Parse()
	require.NoError(t, err)
	assert.True(t, math.IsNaN(figs[Key{"seed001-shape", "idle_step_p90_ms"}]), "NaN reads back")
	assert.InDelta(t, 1e-6, Committed{Path: filepath.Join(t.TempDir(), "none.txt")}.Tolerance(), 0, "no arch line: tolerant")
}
