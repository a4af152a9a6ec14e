package main

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var perfUpdate = flag.Bool("perf.update", false, "TestPerfFigures rewrites "+perfFile+" from this tree's runs")

// Every case of the perf-regression suite gives, in virtual time, exactly
// the figures committed in perfFile: a change that adds a collective per
// iteration, sleeps out a wait or serialises a step moves one, and this
// test says which, old and new. make perf-update (-perf.update) rewrites
// the file when the change is meant.
//
// Without the race detector only (make test-perf): the runs are the same
// code as the race runs of the other tests, and take minutes under it.
func TestPerfFigures(t *testing.T) {
	withoutRace(t, "test-perf")
	path := filepath.Join(repoRoot, perfFile)
	var mu sync.Mutex
	got := map[string][]perfFigure{}
	t.Run("cases", func(t *testing.T) {
		for _, c := range perfCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				figs, err := runPerfCase(c)
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				got[c.name] = figs
			})
		}
	})
	require.Len(t, got, len(perfCases))
	if *perfUpdate {
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, writePerfFile(f, got))
		require.NoError(t, f.Close())
		t.Logf("wrote %s", path)
		return
	}
	want, order, err := readPerfFile(path)
	require.NoError(t, err, "make perf-update writes it")
	tol := perfTolerance(path)
	if tol > 0 {
		t.Logf("%s was written on %q, this is %s: figures compare to %g, not exactly", perfFile, readPerfArch(path), perfArch(), tol)
	}
	var changes []string
	seen := map[perfKey]bool{}
	for _, c := range perfCases {
		for _, f := range got[c.name] {
			k := perfKey{c.name, f.name}
			seen[k] = true
			old, ok := want[k]
			switch {
			case !ok:
				changes = append(changes, k.caseName+" "+k.figure+": not in the file (new: "+fmtPerf(f.value)+")")
			case !samePerf(old, f.value, tol):
				changes = append(changes, perfChange{k, old, f.value}.String())
			}
		}
	}
	for _, k := range order {
		if !seen[k] {
			changes = append(changes, k.caseName+" "+k.figure+": in the file, no longer measured")
		}
	}
	require.Empty(t, changes, "%d figures moved against %s (virtual time: exact):\n  %s\n"+
		"if the change is meant, make perf-update rewrites the file; review its diff", len(changes), perfFile, strings.Join(changes, "\n  "))
}

// Figures compare exactly, or within a relative tolerance (a file of
// another architecture); NaN (no sample) equals only NaN. The file names
// the architecture that wrote it.
func TestSamePerf(t *testing.T) {
	nan := math.NaN()
	assert.True(t, samePerf(1.5, 1.5, 0))
	assert.False(t, samePerf(4.391933671, 4.391933672, 0), "a nanosecond of 4 s")
	assert.False(t, samePerf(4.391933671, 4.391933672, 1e-12))
	assert.True(t, samePerf(1, 1+1e-9, 1e-6))
	assert.False(t, samePerf(1, 1.01, 1e-6))
	assert.True(t, samePerf(nan, nan, 0))
	assert.False(t, samePerf(nan, 0, 1e-6))
	assert.False(t, samePerf(0, nan, 1e-6))
	assert.Equal(t, "c f: 0 -> 5 (from 0)", perfChange{perfKey{"c", "f"}, 0, 5}.String())
	assert.Equal(t, "c f: 2 -> 1 (-50.00%)", perfChange{perfKey{"c", "f"}, 2, 1}.String())
	assert.Equal(t, "c f: 2 -> NaN (no sample on one side)", perfChange{perfKey{"c", "f"}, 2, nan}.String())

	path := filepath.Join(t.TempDir(), "figures.txt")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, writePerfFile(f, map[string][]perfFigure{"seed001-shape": {{"completed", 16}, {"idle_step_p90_ms", nan}}}))
	require.NoError(t, f.Close())
	assert.Equal(t, perfArch(), readPerfArch(path))
	assert.Zero(t, perfTolerance(path), "this architecture's file: exact")
	figs, _, err := readPerfFile(path)
	require.NoError(t, err)
	assert.True(t, math.IsNaN(figs[perfKey{"seed001-shape", "idle_step_p90_ms"}]), "NaN reads back")
	assert.InDelta(t, 1e-6, perfTolerance(filepath.Join(t.TempDir(), "none.txt")), 0, "no arch line: tolerant")
}
