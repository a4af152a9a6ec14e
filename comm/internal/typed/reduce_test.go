package typed

import "testing"

func TestReduceOps(t *testing.T) {
	for _, tc := range []struct {
		op   ReduceOp
		want int64
	}{{Sum, 9}, {Min, 1}, {Max, 5}, {BitOr, 7}, {BitAnd, 1}} {
		a := []int64{5}
		Apply(tc.op, a, []int64{3})
		Apply(tc.op, a, []int64{1})
		if a[0] != tc.want {
			t.Errorf("%s: got %d want %d", tc.op, a[0], tc.want)
		}
	}
	if Valid(ReduceOp(0)) || Valid(ReduceOp(9)) {
		t.Error("unknown ops must be invalid")
	}
}
