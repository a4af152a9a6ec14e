package topology

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// make test-go runs this package's tests without the race detector
// (RACE_FREE in the Makefile): they take five times as long under it, and
// it finds nothing where one goroutine runs. That holds only while neither
// the package nor its tests start a goroutine, which this test checks: in
// none of its files a go statement, nor a call that starts or runs
// goroutines (a method Go, as sync.WaitGroup's and errgroup's;
// Parallel and RunParallel, which run tests at once; AfterFunc, in time
// or context). Its code is still raced wherever ranks call it at once
// (its caches, say): every package that does so runs under -race, with
// this code instrumented.
func TestStartsNoGoroutine(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement: this package's tests run without -race (Makefile RACE_FREE); take it out of that list", fset.Position(n.Pos()))
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					switch sel.Sel.Name {
					case "Go", "Parallel", "RunParallel", "AfterFunc":
						t.Errorf("%s: %s runs code on other goroutines: this package's tests run without -race (Makefile RACE_FREE); take it out of that list", fset.Position(n.Pos()), sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
}
