package clock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cores are the packages that must take their time from a Clock they are
// given (DESIGN.md §9): a direct read of the wall clock, a real timer or a
// context deadline there would make a simulated run depend on the host.
var cores = []string{"../executor", "../transceiver", "../consensus", "../comm/local"}

// forbidden lists, per package, the functions the cores may not call.
var forbidden = map[string][]string{
	"time":    {"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"},
	"context": {"WithTimeout", "WithTimeoutCause", "WithDeadline", "WithDeadlineCause"},
}

// TestCoresTakeTheirTimeFromAClock fails when a non-test file of a core
// package calls time.Now (and the like) or makes a context deadline.
func TestCoresTakeTheirTimeFromAClock(t *testing.T) {
	found := 0
	for _, dir := range cores {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v): the list of cores is stale", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			found++
			for _, v := range violations(t, f) {
				t.Errorf("%s: %s: take time from the Clock in the configuration (package clock), not from package %s", v.pos, v.call, strings.Split(v.call, ".")[0])
			}
		}
	}
	if found == 0 {
		t.Fatal("no core files checked")
	}
}

type violation struct {
	pos  token.Position
	call string
}

func violations(t *testing.T, path string) []violation {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	// The local names of the imports of time and context.
	names := map[string]string{}
	for _, imp := range file.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		if _, ok := forbidden[p]; !ok {
			continue
		}
		name := p
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	var out []violation
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		pkg, ok := names[id.Name]
		if !ok {
			return true
		}
		for _, fn := range forbidden[pkg] {
			if sel.Sel.Name == fn {
				out = append(out, violation{fset.Position(sel.Pos()), pkg + "." + fn})
			}
		}
		return true
	})
	return out
}
