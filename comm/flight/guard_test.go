package flight

import (
	"fmt"
	"sync"
	"testing"
)

// The rank's goroutine records guards and begins operations while another
// (a stall inspector) takes snapshots and pending values: under -race this
// finds any read of a guard set the owner may be writing (a record's set
// is recycled once the ring wraps). Every snapshot's guards must belong to
// their record: the one value recorded before collective i is i.
func TestGuardsOwnerAndInspector(t *testing.T) {
	r := NewRecorder(2) // wraps at once
	var p Path
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, rec := range r.Snapshot() {
				if rec.Kind == KindAllreduce && len(rec.Guards) > 1 {
					t.Errorf("record #%d carries %v: one guard was recorded before it", rec.Seq, rec.Guards)
					return
				}
				for _, g := range rec.Guards {
					if uint64(g.Value) != rec.Seq {
						t.Errorf("record #%d carries guard %v", rec.Seq, g)
						return
					}
				}
			}
			_ = r.Pending()
		}
	}()
	for i := range 20000 {
		r.Guard([]string{"a", "b", "c"}[i%3], int64(i))       // a stale value would show under another name
		r.End(r.BeginP2PAt("world", KindSend, 1, 0, &p), nil) // publishes
		r.End(r.BeginAt("world", uint64(i), KindAllreduce, &p), nil)
	}
	close(stop)
	wg.Wait()
}

// Ranks of one side that recorded a value differently show its range.
func TestMergeGuards(t *testing.T) {
	got := MergeGuards([][]GuardValue{
		{{Name: "fits", Value: 1}, {Name: "free", Value: 32}, {Name: "busy", Value: 1, Bool: true}},
		{{Name: "fits", Value: 1}, {Name: "free", Value: 0}, {Name: "busy", Value: 0, Bool: true}},
		{{Name: "free", Value: 8}},
	})
	if s := GuardsText(got); s != "fits=1 (on 2 of 3 ranks), free=0..32, busy=false|true (on 2 of 3 ranks)" {
		t.Errorf("merged %q", s)
	}
	// A name one rank's set holds twice counts that rank once.
	got = MergeGuards([][]GuardValue{{{Name: "fits", Value: 1}, {Name: "fits", Value: 2}}, {{Name: "free", Value: 3}}})
	if s := GuardsText(got); s != "fits=1..2 (on 1 of 2 ranks), free=3 (on 1 of 2 ranks)" {
		t.Errorf("merged %q", s)
	}
}

// A collective's record holds exactly the guards recorded since the one
// before it: none when none were, never a value left in a recycled set
// from a record that left the ring. The names change with every
// collective and the ring depth varies, so a stale value cannot hide
// under a fresh one of the same name. Deterministic (one goroutine): the
// inspector test above only sees a stale value when its snapshot lands
// at the right moment.
func TestGuardsClearedEachCollective(t *testing.T) {
	for _, depth := range []int{1, 2, 3, 4} {
		r := NewRecorder(depth)
		var p Path
		for i := range 8 * (depth + 1) {
			var want string
			if i%3 != 2 { // every third collective records nothing before it
				name := []string{"a", "b", "c", "d", "e"}[i%5]
				r.Guard(name, int64(i))
				want = fmt.Sprintf("%s=%d", name, i)
			}
			r.End(r.BeginAt("world", uint64(i), KindAllreduce, &p), nil)
			recs := r.Snapshot()
			var got string
			for _, g := range recs[len(recs)-1].Guards {
				got += fmt.Sprintf("%s=%d", g.Name, g.Value)
			}
			if got != want {
				t.Fatalf("depth %d: collective #%d carries %q, want %q", depth, i, got, want)
			}
		}
	}
}
