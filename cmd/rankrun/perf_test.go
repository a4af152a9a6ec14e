package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
	if raceEnabled {
		t.Skip("run without -race, by make test-perf")
	}
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
			case !samePerf(old, f.value):
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
