package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withoutRace skips t under the race detector; the Makefile target named
// runs it without (make test runs both). It is only for tests that run in
// simulation or start no goroutine, and whose figures are the point. The
// simulation runs one rank at a time, handing a baton over channels, so
// every access of one rank to another's data is ordered and the detector
// cannot report a race between ranks there; it only makes such a run 5 to
// 10 times slower (the KV pattern's every word is a checked access). A
// test on the local backend, where ranks do run at once, must not use it.
// The code these tests run runs under -race in the package's other tests,
// tests/multirank and executor. TestRaceSkipsRunInTheirTarget holds the
// Makefile to the list.
func withoutRace(t *testing.T, target string) {
	t.Helper()
	if raceEnabled {
		t.Skip("run without -race, by make " + target)
	}
}

// Every test that skips itself under the race detector is one that the
// Makefile target it names runs (that target's -run pattern matches it,
// and make test runs that target), and every name those patterns list is
// such a test: a test skipped under -race and left out of its target
// would run nowhere. A skip this check cannot see is refused: withoutRace
// anywhere but as a statement of a Test function's own body (a subtest, a
// helper, a branch), and raceEnabled read anywhere but here. Each RACE_FREE
// package of the Makefile (test-go runs it without -race) has the test
// that holds it to starting no goroutine.
func TestRaceSkipsRunInTheirTarget(t *testing.T) {
	skipped := map[string]string{} // test -> target
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		direct := map[*ast.CallExpr]string{} // withoutRace calls that are a Test function's own statements -> that test
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			for _, st := range fn.Body.List {
				if es, ok := st.(*ast.ExprStmt); ok {
					if c, ok := es.X.(*ast.CallExpr); ok && isIdent(c.Fun, "withoutRace") {
						direct[c] = fn.Name.Name
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if !isIdent(n.Fun, "withoutRace") {
					return true
				}
				test, ok := direct[n]
				if !assert.True(t, ok, "%s: withoutRace is called as a statement of a Test function's own body, not in a subtest, a helper or a branch: this check must see which test skips", fset.Position(n.Pos())) {
					return true
				}
				lit, ok := n.Args[1].(*ast.BasicLit)
				if assert.True(t, ok, "%s: withoutRace's target is a string literal", fset.Position(n.Pos())) {
					target, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					skipped[test] = target
				}
			case *ast.Ident:
				if n.Name == "raceEnabled" && !strings.HasPrefix(name, "race_") {
					t.Errorf("%s: raceEnabled read outside race_test.go: skip with withoutRace(t, target), which this check sees", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	require.NotEmpty(t, skipped, "no test calls withoutRace: this check reads nothing")

	mk := readMakefile(t)
	patterns := mk.runPatterns(t)
	for test, target := range skipped {
		assert.Contains(t, mk.prereqs["test"], target, "%s skips itself under -race for make %s, which make test does not run", test, target)
		re, ok := patterns[target]
		if assert.True(t, ok, "%s skips itself under -race for make %s, which runs no go test -run ./cmd/rankrun", test, target) {
			assert.True(t, re.MatchString(test), "%s skips itself under -race, but make %s's -run pattern %s does not match it", test, target, re)
		}
	}
	for target, re := range patterns {
		for _, name := range strings.Split(strings.Trim(re.String(), "^$()"), "|") {
			name = strings.Trim(name, "^$()")
			if !strings.HasPrefix(name, "Test") {
				continue
			}
			assert.Equal(t, target, skipped[name], "make %s runs %s without -race, but %s does not skip itself under -race with withoutRace(t, %q)", target, name, name, target)
		}
	}

	free := strings.Fields(mk.vars["RACE_FREE"])
	require.NotEmpty(t, free, "the Makefile's RACE_FREE")
	for _, pkg := range free {
		dir := filepath.Join(repoRoot, strings.TrimPrefix(pkg, "github.com/rankrun/rankrun/"))
		b, err := os.ReadFile(filepath.Join(dir, "race_free_test.go"))
		if assert.NoError(t, err, "%s runs without -race (RACE_FREE): its race_free_test.go holds it to starting no goroutine", pkg) {
			assert.Contains(t, string(b), "func TestStartsNoGoroutine(t *testing.T)", "%s/race_free_test.go", pkg)
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// makefile is what these checks read of the Makefile: its variables (as
// assigned with = or :=), each target's prerequisites and recipe lines,
// lines joined where they end in a backslash.
type makefile struct {
	vars    map[string]string
	prereqs map[string][]string
	recipes map[string][]string
}

func readMakefile(t *testing.T) makefile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	mk := makefile{vars: map[string]string{}, prereqs: map[string][]string{}, recipes: map[string][]string{}}
	assign := regexp.MustCompile(`^([A-Z_]+)\s*:?=\s*(.*)$`)
	rule := regexp.MustCompile(`^([a-z-]+):(.*)$`)
	target := ""
	for _, l := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		if m := assign.FindStringSubmatch(l); m != nil {
			mk.vars[m[1]] = strings.TrimSpace(m[2])
		} else if m := rule.FindStringSubmatch(l); m != nil {
			target = m[1]
			mk.prereqs[target] = strings.Fields(m[2])
		} else if strings.HasPrefix(l, "\t") && target != "" {
			mk.recipes[target] = append(mk.recipes[target], l)
		}
	}
	return mk
}

// runPatterns is, for each target with a recipe line that runs this
// package's tests by name without -race (perf-update aside), its -run
// pattern, with the Makefile's variables expanded and $$ read as $.
func (mk makefile) runPatterns(t *testing.T) map[string]*regexp.Regexp {
	t.Helper()
	ref := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	expand := func(s string) string {
		return ref.ReplaceAllStringFunc(s, func(r string) string { return mk.vars[ref.FindStringSubmatch(r)[1]] })
	}
	run := regexp.MustCompile(`-run\s+'([^']*)'\s+\./cmd/rankrun`)
	out := map[string]*regexp.Regexp{}
	for target, lines := range mk.recipes {
		if target == "perf-update" {
			continue
		}
		for _, l := range lines {
			if strings.Contains(l, "-race") {
				continue
			}
			if m := run.FindStringSubmatch(expand(l)); m != nil {
				re, err := regexp.Compile(strings.ReplaceAll(m[1], "$$", "$"))
				require.NoError(t, err, "make %s's -run pattern", target)
				out[target] = re
			}
		}
	}
	require.NotEmpty(t, out, "no Makefile target runs ./cmd/rankrun tests by name")
	return out
}
