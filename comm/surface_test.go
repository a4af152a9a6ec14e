package comm_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"os"
	"sort"
	"testing"
)

// surface lists a package's exported identifiers: its package-level names
// (aliases count) and the exported methods of its exported types, interface
// methods included, as TypeName.Method.
func surface(t *testing.T, path string) []string {
	t.Helper()
	pkg, err := importer.ForCompiler(token.NewFileSet(), "source", nil).Import(path)
	if err != nil {
		t.Fatalf("type-check %s: %v", path, err)
	}
	var names []string
	sc := pkg.Scope()
	for _, n := range sc.Names() {
		o := sc.Lookup(n)
		if !o.Exported() {
			continue
		}
		names = append(names, n)
		tn, ok := o.(*types.TypeName)
		if !ok {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		for i := 0; i < named.NumMethods(); i++ {
			if m := named.Method(i); m.Exported() {
				names = append(names, n+"."+m.Name())
			}
		}
		if it, ok := named.Underlying().(*types.Interface); ok {
			for i := 0; i < it.NumExplicitMethods(); i++ {
				if m := it.ExplicitMethod(i); m.Exported() {
					names = append(names, n+"."+m.Name())
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

func TestSurfaceList(t *testing.T) {
	names := surface(t, "github.com/rankrun/rankrun/comm")
	if os.Getenv("SURFACE") != "" {
		for _, n := range names {
			t.Log(n)
		}
	}
	t.Logf("%d", len(names))
}
