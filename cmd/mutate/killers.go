package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// killersFile holds, for each mutant, the test that killed it last. A
// mutant runs that test alone first: when it fails there (and passed on
// the baseline) the mutant is killed by it, as the whole suite's run
// would have said, without building and running the rest of the suite.
// Otherwise (a stale line, a test renamed or gone, a mutant it no longer
// kills) the whole suite decides, as without the file: a line can cost
// time, never a verdict. go run ./cmd/mutate -update-killers rewrites it
// from a run's verdicts.
const killersFile = "cmd/mutate/killers.txt"

const killersHead = `# The test that killed each mutant last: mutant, package, top-level test,
# tab-separated. make mutate runs that test first and the mutant's whole
# suite only when it does not kill it there (cmd/mutate/killers.go).
# Rewritten by go run ./cmd/mutate -update-killers.
`

// readKillers reads a killers file: mutant name -> the test (its top
// level) that killed it last. A missing file is an empty map.
func readKillers(path string) (map[string]testID, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]testID{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseKillers(f, path)
}

func parseKillers(r io.Reader, path string) (map[string]testID, error) {
	out := map[string]testID{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[0] == "" || f[1] == "" || !strings.HasPrefix(f[2], "Test") || strings.Contains(f[2], "/") {
			return nil, fmt.Errorf("%s:%d: want mutant<TAB>package<TAB>TestName (a top-level test), got %q", path, n, line)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("%s:%d: mutant %s listed twice", path, n, f[0])
		}
		out[f[0]] = testID{pkg: f[1], name: f[2]}
	}
	return out, sc.Err()
}

// writeKillers writes ks (mutant -> top-level test) in the killers
// file's format, sorted by mutant.
func writeKillers(w io.Writer, ks map[string]testID) error {
	if _, err := io.WriteString(w, killersHead); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(ks)) {
		if _, err := fmt.Fprintf(w, "%s\t%s\t%s\n", name, ks[name].pkg, ks[name].name); err != nil {
			return err
		}
	}
	return nil
}

// updatedKillers is old with the killer of every mutant vs killed (its
// top-level test; an MPI mutant's suite runs under mpirun, never alone
// first, so it has none); lines of mutants vs did not run stay, and
// those vs ran but did not kill are dropped.
func updatedKillers(old map[string]testID, vs []verdict) map[string]testID {
	ks := maps.Clone(old)
	for _, v := range vs {
		delete(ks, v.m.name)
		if v.kind == killed && v.killer.name != "" && v.m.mpi == nil {
			ks[v.m.name] = testID{pkg: v.killer.pkg, name: top(v.killer.name)}
		}
	}
	return ks
}

// tryKiller runs h, the test that killed m last, alone on m (already
// applied in scratch), if it passed on the baseline. ok: it killed m, and
// v says so; otherwise the caller runs m's whole suite.
func tryKiller(scratch, module string, m mutant, h testID, base map[testID]bool, timeout time.Duration) (v verdict, ok bool) {
	if !base[h] {
		return v, false // not in this run's baseline: it cannot kill
	}
	args := append(testArgs(timeout, "-failfast", "-run", "^"+regexp.QuoteMeta(h.name)+"$"), "./"+h.pkg)
	ran, err := goTest(scratch, module, args, timeout, func(o *outcome) bool { _, ok := o.killer(base); return ok })
	if err != nil {
		return v, false
	}
	id, ok := ran.killer(base)
	if !ok {
		return v, false
	}
	return verdict{m: m, kind: killed, by: id.String(), killer: id, first: true}, true
}
