package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

// killersFile holds, for each mutant, the test that killed it last. A
// mutant runs that test alone first; it is killed there when the test
// fails on it, passed on the baseline, passes alone on the unmutated tree
// (so that it is not failing for want of an earlier test), belongs to the
// mutant's suite, and the whole suite still type-checks and passes go
// test's vet checks with the mutant (what the suite's build would have
// refused). That is the verdict the whole suite's run would give. In
// every other case (a stale line, a test renamed or gone, a mutant it no
// longer kills, one that does not compile elsewhere) the whole suite
// decides, as without the file: a line can cost time, never a verdict.
// go run ./tools/mutate -update-killers rewrites it from a run's verdicts.
const killersFile = "tools/mutate/killers.txt"

const killersHead = `# The test that killed each mutant last: mutant, package, top-level test,
# tab-separated. make mutate runs that test first and the mutant's whole
# suite only when it does not kill it there (tools/mutate/killers.go).
# Rewritten by go run ./tools/mutate -update-killers.
`

// killerBound bounds a last killer's run alone: a mutant it does not
// kill in that time goes to its whole suite, which has the full -timeout.
const killerBound = 2 * time.Minute

// vetChecks are the go vet checks go test runs before it builds a test
// binary (go help test): a mutant that fails one fails its suite's build.
var vetChecks = []string{"-atomic", "-bool", "-buildtags", "-directive", "-errorsas", "-ifaceassert", "-nilfunc", "-printf", "-stringintconv", "-tests"}

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
// first, so it has none); lines of mutants vs did not run stay, those vs
// ran but did not kill are dropped, and so are names no longer in the
// catalogue (known).
func updatedKillers(old map[string]testID, vs []verdict, known func(string) bool) map[string]testID {
	ks := maps.Clone(old)
	maps.DeleteFunc(ks, func(name string, _ testID) bool { return !known(name) })
	for _, v := range vs {
		delete(ks, v.m.name)
		if v.kind == killed && v.killer.name != "" && v.m.mpi == nil {
			ks[v.m.name] = testID{pkg: v.killer.pkg, name: top(v.killer.name)}
		}
	}
	return ks
}

// firstRuns runs each mutant's last killer alone before its suite.
type firstRuns struct {
	scratch, module string
	killers         map[string]testID
	timeout         time.Duration
	suites          map[string]map[string]bool // a suite's patterns -> its packages (as testID.pkg)
	alone           map[testID]bool            // a last killer run alone on the unmutated tree: passed
}

func newFirstRuns(scratch, module string, killers map[string]testID, timeout time.Duration) *firstRuns {
	return &firstRuns{scratch: scratch, module: module, killers: killers, timeout: timeout,
		suites: map[string]map[string]bool{}, alone: map[testID]bool{}}
}

// usable returns m's last killer when it may kill m alone: m is no MPI
// mutant, the test is of m's suite and passed on the baseline, and it
// passes alone on the unmutated tree (run once, the first time; call
// this before m is applied).
func (f *firstRuns) usable(m mutant, base map[testID]bool) (testID, bool) {
	h, ok := f.killers[m.name]
	if !ok || m.mpi != nil || !base[h] || !f.inSuite(m.suite(), h.pkg) {
		return h, false
	}
	passed, seen := f.alone[h]
	if !seen {
		ran, err := goTest(f.scratch, f.module, f.aloneArgs(h), min(f.timeout, killerBound), nil)
		passed = err == nil && !ran.exitFailed && !ran.deadline && ran.passed[h]
		f.alone[h] = passed
	}
	return h, passed
}

// inSuite reports whether pkg (as testID.pkg) is one of the packages
// suite's patterns name (go list, once per suite).
func (f *firstRuns) inSuite(suite []string, pkg string) bool {
	key := strings.Join(suite, " ")
	pkgs, ok := f.suites[key]
	if !ok {
		pkgs = map[string]bool{}
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-e"}, suite...)...)
		cmd.Dir = f.scratch
		if out, err := cmd.Output(); err == nil {
			o := newOutcome(f.module)
			for _, p := range strings.Fields(string(out)) {
				pkgs[o.rel(p)] = true
			}
		}
		f.suites[key] = pkgs
	}
	return pkgs[pkg]
}

func (f *firstRuns) aloneArgs(h testID) []string {
	return append(testArgs(min(f.timeout, killerBound), "-failfast", "-run", "^"+regexp.QuoteMeta(h.name)+"$"), "./"+h.pkg)
}

// kill runs h, m's usable last killer, alone on m (applied in scratch).
// ok: it failed there, and m's whole suite type-checks and passes go
// test's vet checks with m; v is then the verdict. Otherwise the caller
// runs m's whole suite, which decides.
func (f *firstRuns) kill(m mutant, h testID, base map[testID]bool) (v verdict, ok bool) {
	ran, err := goTest(f.scratch, f.module, f.aloneArgs(h), min(f.timeout, killerBound), func(o *outcome) bool { _, ok := o.killer(base); return ok })
	if err != nil {
		return v, false
	}
	id, ok := ran.killer(base)
	if !ok {
		return v, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	vet := exec.CommandContext(ctx, "go", append(append([]string{"vet"}, vetChecks...), m.suite()...)...)
	vet.Dir = f.scratch
	if vet.Run() != nil {
		return v, false // it does not build everywhere: the suite's build says where
	}
	return verdict{m: m, kind: killed, by: id.String(), killer: id, first: true}, true
}
