package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withoutRace skips t under the race detector; the Makefile target named
// runs it without (make test runs both). It is for runs in simulation
// whose figures are the point: virtual time makes them exact on any host,
// the race detector makes them 5 to 10 times slower (the KV pattern's
// every word is a race-checked access), and the code they run is the code
// the other tests of this package, tests/multirank and executor run under
// it. TestRaceSkipsRunInTheirTarget holds the Makefile to the list.
func withoutRace(t *testing.T, target string) {
	t.Helper()
	if raceEnabled {
		t.Skip("run without -race, by make " + target)
	}
}

// Every test that skips itself under the race detector is one that the
// Makefile target it names runs (that target's -run pattern matches it),
// and every name those patterns list is such a test: a test skipped under
// -race and left out of its target would run nowhere.
func TestRaceSkipsRunInTheirTarget(t *testing.T) {
	skipped := map[string]string{} // test -> target
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			for _, st := range fn.Body.List {
				call, ok := st.(*ast.ExprStmt)
				if !ok {
					continue
				}
				c, ok := call.X.(*ast.CallExpr)
				if !ok || len(c.Args) != 2 {
					continue
				}
				if id, ok := c.Fun.(*ast.Ident); !ok || id.Name != "withoutRace" {
					continue
				}
				lit, ok := c.Args[1].(*ast.BasicLit)
				require.True(t, ok, "%s: withoutRace's target is a string literal", fn.Name.Name)
				target, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				skipped[fn.Name.Name] = target
			}
		}
	}
	require.NotEmpty(t, skipped, "no test calls withoutRace: this check reads nothing")

	patterns := makeRunPatterns(t)
	for test, target := range skipped {
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
}

// makeRunPatterns reads the Makefile's targets that run this package's
// tests by name without -race: target -> its -run pattern, with the
// Makefile's variables expanded and $$ read as $.
func makeRunPatterns(t *testing.T) map[string]*regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	lines := strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n")
	vars := map[string]string{}
	assign := regexp.MustCompile(`^([A-Z_]+)\s*:?=\s*(.*)$`)
	for _, l := range lines {
		if m := assign.FindStringSubmatch(l); m != nil {
			vars[m[1]] = strings.TrimSpace(m[2])
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	expand := func(s string) string {
		return ref.ReplaceAllStringFunc(s, func(r string) string { return vars[ref.FindStringSubmatch(r)[1]] })
	}
	out := map[string]*regexp.Regexp{}
	target := ""
	run := regexp.MustCompile(`-run\s+'([^']*)'\s+\./cmd/rankrun`)
	for _, l := range lines {
		if m := regexp.MustCompile(`^([a-z-]+):`).FindStringSubmatch(l); m != nil {
			target = m[1]
			continue
		}
		if !strings.HasPrefix(l, "\t") || strings.Contains(l, "-race") || strings.Contains(l, "-update") {
			continue
		}
		if m := run.FindStringSubmatch(expand(l)); m != nil && !slices.Contains([]string{"", "perf-update"}, target) {
			re, err := regexp.Compile(strings.ReplaceAll(m[1], "$$", "$"))
			require.NoError(t, err, "make %s's -run pattern", target)
			out[target] = re
		}
	}
	require.NotEmpty(t, out, "no Makefile target runs ./cmd/rankrun tests by name")
	return out
}
