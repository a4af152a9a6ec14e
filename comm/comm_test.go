package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm/flight"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestErrorMessagesNameSitesAndRanks(t *testing.T) {
	de := &DesyncError{Group: "world", Self: 1, Entries: []Entry{
		{Rank: 0, Seq: 3, Kind: flight.KindBarrier, Site: "a.go:1"},
		{Rank: 1, Seq: 3, Kind: flight.KindAllreduce, Site: "b.go:2", Shape: 2<<8 | int64(Sum)},
		{Rank: 2, Seq: 3, Kind: flight.KindBarrier, Site: "a.go:1"},
	}}
	msg := de.Error()
	for _, want := range []string{`"world"`, "ranks [0 2] entered Barrier #3 at a.go:1", "ranks [1] entered Allreduce #3 at b.go:2 (count 2, sum)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("desync message %q lacks %q", msg, want)
		}
	}
	if !errors.Is(de, ErrDesync) {
		t.Error("DesyncError must wrap ErrDesync")
	}
	te := &TimeoutError{Group: "world/s0c1", Self: 0, Waiting: Entry{Kind: flight.KindAllgather, Seq: 9, Site: "c.go:3"}, Missing: []int{2},
		Peers: []PeerRecords{{Rank: 2, Records: []flight.OpRecord{{Group: "world", Kind: flight.KindRecv, Peer: 0, Tag: 5, Site: "d.go:4"}}}}}
	msg = te.Error()
	for _, want := range []string{"ranks [2] never arrived", "rank 2 last: Irecv peer 0 tag 5", "Allgather #9 at c.go:3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("timeout message %q lacks %q", msg, want)
		}
	}
	if !errors.Is(te, ErrCollectiveTimeout) || !strings.Contains(te.FlightLog(), "rank 2:") {
		t.Error("TimeoutError must wrap ErrCollectiveTimeout and log every peer")
	}
}

func TestGatheredReusesItsBuffers(t *testing.T) {
	var g Gathered
	flat := g.Reset([]int{2, 0, 3})
	if len(flat) != 5 || len(g.Of(1)) != 0 || len(g.Of(2)) != 3 {
		t.Fatalf("layout: %+v", g)
	}
	copy(flat, []int64{1, 2, 3, 4, 5})
	if g.Of(2)[0] != 3 {
		t.Fatalf("Of(2) = %v", g.Of(2))
	}
	counts := []int{1, 1, 1}
	if n := testing.AllocsPerRun(100, func() { g.Reset(counts) }); n != 0 {
		t.Fatalf("Reset allocated %v times with enough capacity", n)
	}
}

// A rank whose program returned is named so, with its last operation:
// the collective waits for a call it will never make (not a rank that is
// merely behind, nor a desync).
func TestTimeoutMessageNamesARankThatReturned(t *testing.T) {
	// Its last record, a receive it left posted, is no wait of its own.
	last := flight.OpRecord{Group: "world", Kind: flight.KindRecv, Peer: 3, Tag: 9, Start: time.Unix(1, 0)}
	te := &TimeoutError{Group: "world", Self: 1, Bound: time.Second, Waiting: Entry{Kind: flight.KindBarrier, Seq: 4}, Missing: []int{0, 2},
		Peers: []PeerRecords{{Rank: 0, Counted: true, Entered: 3, Returned: true, Records: []flight.OpRecord{last}},
			{Rank: 1, Counted: true, Entered: 4}, {Rank: 2, Counted: true, Entered: 3}, {Rank: 3, Counted: true, Entered: 4}}}
	msg := te.Error()
	for _, want := range []string{"ranks [0 2] never arrived; rank 0 has returned from its program: it enters nothing more (its last: " + last.String() + ")",
		"; rank 2 is at #3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("timeout message %q lacks %q", msg, want)
		}
	}
	if strings.Count(msg, "returned") != 1 {
		t.Errorf("timeout message %q: only rank 0 returned", msg)
	}
	if w := te.WaitsOn(); len(w) != 0 || strings.Contains(msg, "they wait in point-to-point") {
		t.Errorf("a rank that returned waits on no one, yet WaitsOn says %v: %q", w, msg)
	}
	if log := te.FlightLog(); strings.Count(log, "had returned from its program") != 1 {
		t.Errorf("flight log names rank 0 alone as returned:\n%s", log)
	}
}

func TestTimeoutMessageFromABoundedBackend(t *testing.T) {
	te := &TimeoutError{Group: "world/s1c0", Self: 0, Bound: 3 * time.Second, WorldRanks: []int{1, 2, 4},
		Waiting: Entry{Kind: flight.KindBcast, Seq: 41, Site: "?"}, Missing: []int{1, 2},
		Peers: []PeerRecords{{Rank: 0, Counted: true, Entered: 41}, {Rank: 1, Counted: true, Entered: 40},
			{Rank: 2, Err: errors.New("no answer to the stall inspector within 300ms")}}}
	msg := te.Error()
	for _, want := range []string{`group "world/s1c0" after 3s`, "rank 0 (world rank 1) waited in Bcast #41;", "ranks [1 2] never arrived (world ranks [2 4])",
		"rank 1 (world rank 2) is at #40", "rank 2 (world rank 4) unreachable: no answer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("timeout message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, " at ?") {
		t.Errorf("timeout message %q names an unknown site", msg)
	}
	if !strings.Contains(te.FlightLog(), "had entered 40 collectives") {
		t.Errorf("flight log lacks the entered count:\n%s", te.FlightLog())
	}
	te.WorldRanks = []int{0, 1, 2}
	if msg := te.Error(); strings.Contains(msg, "world ranks") {
		t.Errorf("identity world ranks printed: %q", msg)
	}
}

// Ranks that never arrived because they wait in a point-to-point operation
// on another rank (a sync receive, a control send to a frozen peer) point
// at it: the error follows them one step and names that rank's world rank.
func TestTimeoutNamesTheRankTheMissingOnesWaitOn(t *testing.T) {
	send := func(group string, peer int) []flight.OpRecord {
		return []flight.OpRecord{{Group: group, Kind: flight.KindSend, Peer: peer, Tag: 1, Start: time.Unix(1, 0)}}
	}
	te := &TimeoutError{Group: "world/s1c2/s1c0", Self: 1, WorldRanks: []int{2, 3, 4, 5}, Missing: []int{0, 2},
		Waiting: Entry{Kind: flight.KindAllgather, Seq: 3},
		Peers: []PeerRecords{{Rank: 0, Records: send("world", 0)}, {Rank: 1}, {Rank: 2, Records: send("world/s1c2/s1c0", 3)},
			{Rank: 3, Records: send("world", 1)}}}
	// Rank 0 waits on world rank 0; rank 2 on group rank 3, world rank 5;
	// rank 3 arrived, so what it waits on is not followed.
	require.Equal(t, []int{0, 5}, te.WaitsOn())
	require.Contains(t, te.Error(), "ranks [0 2] never arrived (world ranks [2 4])")
	require.Contains(t, te.Error(), "; they wait in point-to-point on world ranks [0 5]")
	// A finished operation, or a collective, is no wait.
	te.Peers[0].Records[0].End = time.Unix(2, 0)
	te.Peers[2].Records[0].Kind = flight.KindAllreduce
	require.Empty(t, te.WaitsOn())
}

// lateComm's receive times out, then matches as Sendrecv withdraws it:
// Cancel fails, and the message has landed (landed) or is still arriving.
type lateComm struct {
	Comm
	landed bool
}

type lateRecv struct {
	buf       []byte
	landed    bool
	cancelled bool
}

func (c *lateComm) Irecv(buf []byte, src, tag int) (Request, error) {
	return &lateRecv{buf: buf, landed: c.landed}, nil
}
func (c *lateComm) Isend(buf []byte, dest, tag int) (Request, error) { return doneSend{}, nil }

func (q *lateRecv) Wait(context.Context) (Status, error) {
	return Status{}, &WaitTimeoutError{Group: "world", Op: "receive from rank 1 tag 2", Bound: time.Second}
}
func (q *lateRecv) Cancel() error {
	q.cancelled = true
	if q.landed {
		copy(q.buf, "late")
	}
	return fmt.Errorf("%w: the receive already matched", ErrNotCancelled)
}
func (q *lateRecv) Test() (Status, bool, error) {
	if !q.cancelled || !q.landed {
		return Status{}, false, nil
	}
	return Status{Source: 1, Tag: 2, Len: 4}, true, nil
}

type doneSend struct{}

func (doneSend) Wait(context.Context) (Status, error) { return Status{}, nil }
func (doneSend) Cancel() error                        { return ErrNotCancelled }
func (doneSend) Test() (Status, bool, error)          { return Status{}, true, nil }

// A receive that matched just as Sendrecv withdrew it after its bound
// counts when it has landed; when it is still arriving the error says the
// buffer is still in use.
func TestSendrecvCountsAReceiveThatMatchedLate(t *testing.T) {
	buf := make([]byte, 4)
	n, err := Sendrecv(context.Background(), &lateComm{landed: true}, []byte("ping"), 1, 1, buf, 1, 2)
	if err != nil || n != 4 || string(buf) != "late" {
		t.Fatalf("landed late: n %d err %v buf %q, want 4 elements of \"late\" and no error", n, err, buf)
	}
	_, err = Sendrecv(context.Background(), &lateComm{}, []byte("ping"), 1, 1, make([]byte, 4), 1, 2)
	if !errors.Is(err, ErrWaitTimeout) || !errors.Is(err, ErrNotCancelled) || !strings.Contains(err.Error(), "still arriving (recv stays in use until it lands)") {
		t.Fatalf("still arriving: %v, want the timeout and that recv is still in use", err)
	}
}
