package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rankrun/rankrun/internal/perfsuite"
	"github.com/stretchr/testify/require"
)

var perfUpdate = flag.Bool("perf.update", false, "TestPerfFigures rewrites "+perfsuite.File+" from this tree's runs")

// Every case of the perf-regression suite gives, in virtual time, exactly
// the figures committed in perfsuite.File: a change that adds a collective per
// iteration, sleeps out a wait or serialises a step moves one, and this
// test says which, old and new. make perf-update (-perf.update) rewrites
// the file when the change is meant.
//
// Without the race detector only (make test-perf): the runs are the same
// code as the race runs of the other tests, and take minutes under it.
func TestPerfFigures(t *testing.T) {
	withoutRace(t, "test-perf")
	path := filepath.Join(repoRoot, perfsuite.File)
	var mu sync.Mutex
	got := map[string][]perfsuite.Figure{}
	t.Run("cases", func(t *testing.T) {
		for _, c := range perfsuite.Cases {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				figs, err := perfsuite.RunCase(c)
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				got[c.Name] = figs
			})
		}
	})
	require.Len(t, got, len(perfsuite.Cases))
	if *perfUpdate {
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, perfsuite.Write(f, got))
		require.NoError(t, f.Close())
		t.Logf("wrote %s", path)
		return
	}
	committed := perfsuite.Committed{Path: path}
	want, order, err := committed.Parse()
	require.NoError(t, err, "make perf-update writes it")
	tol := committed.Tolerance()
	if tol > 0 {
		t.Logf("%s was written on %q, this is %s: figures compare to %g, not exactly", perfsuite.File, committed.Arch(), perfsuite.Arch(), tol)
	}
	var changes []string
	seen := map[perfsuite.Key]bool{}
	for _, c := range perfsuite.Cases {
		for _, f := range got[c.Name] {
			k := perfsuite.Key{Case: c.Name, Figure: f.Name}
			seen[k] = true
			old, ok := want[k]
			switch {
			case !ok:
				changes = append(changes, k.Case+" "+k.Figure+": not in the file (new: "+perfsuite.Format(f.Value)+")")
			case !perfsuite.Same(old, f.Value, tol):
				changes = append(changes, perfsuite.Change{Key: k, Old: old, New: f.Value}.String())
			}
		}
	}
	for _, k := range order {
		if !seen[k] {
			changes = append(changes, k.Case+" "+k.Figure+": in the file, no longer measured")
		}
	}
	require.Empty(t, changes, "%d figures moved against %s (virtual time: exact):\n  %s\n"+
		"if the change is meant, make perf-update rewrites the file; review its diff", len(changes), perfsuite.File, strings.Join(changes, "\n  "))
}
