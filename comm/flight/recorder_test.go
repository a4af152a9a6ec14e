package flight

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecorderKeepsTheLastOperations(t *testing.T) {
	r := NewRecorder(4)
	for i := range 10 {
		id := r.Begin("world", uint64(i+1), KindAllreduce, 0)
		if i < 9 {
			r.End(id, nil)
		}
	}
	got := r.Snapshot()
	if len(got) != 4 {
		t.Fatalf("kept %d records, want 4", len(got))
	}
	for i, rec := range got {
		if rec.Seq != uint64(7+i) {
			t.Fatalf("record %d has seq %d, want %d (oldest first)", i, rec.Seq, 7+i)
		}
	}
	if !got[3].InProgress() || got[2].InProgress() {
		t.Fatalf("in-progress flags wrong: %v", got)
	}
	// Ending an operation pushed out of the ring is a no-op.
	r.End(0, errors.New("late"))
	for _, rec := range r.Snapshot() {
		if rec.Err != "" {
			t.Fatalf("a stale End touched %v", rec)
		}
	}
	var nilRec *Recorder
	nilRec.End(nilRec.Begin("x", 1, KindBarrier, 0), nil)
	if nilRec.Snapshot() != nil {
		t.Fatal("nil recorder must record nothing")
	}
}

func TestRecordingDoesNotAllocate(t *testing.T) {
	r := NewRecorder(0)
	if n := testing.AllocsPerRun(100, func() { r.End(r.Begin("world", 1, KindBarrier, 1), nil) }); n != 0 {
		t.Fatalf("Begin+End allocated %v times", n)
	}
}
