package flight

import (
	"runtime"
	"strings"
	"testing"
)

//go:noinline
func viaMethod(p *Path) { p.Capture() } // stands for a checked method

//go:noinline
func branchA(p *Path) { viaMethod(p) }

//go:noinline
func branchB(p *Path) { viaMethod(p) }

func TestPathStartsAtTheCallerOfTheMethod(t *testing.T) {
	var p Path
	_, _, line, _ := runtime.Caller(0)
	viaMethod(&p) // line+1
	fs := p.frames()
	if len(fs) == 0 || !strings.HasSuffix(fs[0].Function, "TestPathStartsAtTheCallerOfTheMethod") || fs[0].Line != line+1 {
		t.Fatalf("path starts at %+v, want this test at line %d", fs[0], line+1)
	}
	// Frames of packages comm and flight are plumbing to Site (this test is one).
	if s := p.Site(); strings.Contains(s, "path_test.go:") {
		t.Fatalf("site %q names a frame of package flight", s)
	}
}

func TestPathTellsBranchesApart(t *testing.T) {
	var a [2]Path
	var b Path
	for i := range a {
		branchA(&a[i]) // one call site, twice
	}
	branchB(&b)
	a1 := a[0]
	if a[0].n != a[1].n || a[0].pcs != a[1].pcs || a[0].Hash() != a[1].Hash() {
		t.Fatalf("one call site gave two paths")
	}
	if a1.pcs[0] == b.pcs[0] {
		t.Fatalf("branchA and branchB call the method from different lines but the innermost frames agree")
	}
	if a1.Hash() == b.Hash() {
		t.Fatal("different branches hash alike")
	}
	// From the outside in, the paths part at the two call lines here.
	if l, r, ok := strings.Cut(Divergence(&a1, &b), " vs "); !ok || l == r || !strings.Contains(l, "path_test.go") || !strings.Contains(r, "path_test.go") {
		t.Fatalf("divergence %q does not name the two call lines", Divergence(&a1, &b))
	}
}

func BenchmarkPathCapture(b *testing.B) {
	var p Path
	b.ReportAllocs()
	for range b.N {
		viaMethod(&p)
	}
}
