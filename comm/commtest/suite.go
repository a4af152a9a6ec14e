package commtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// caseBound bounds every case: a conformance case that hangs fails instead.
const caseBound = 60 * time.Second

type testCase struct {
	name    string
	minSize int
	opts    Options
	fn      func(n int) RankFunc
}

// concurrent lists the cases that drive one rank from several goroutines.
var concurrent = map[string]bool{"PointToPointWithCollectives": true}

// rankOrder lists the cases that assert floating-point reductions in rank
// order.
var rankOrder = map[string]bool{"TypedFloatRankOrder": true}

// Run runs every conformance case at every size the launcher supports.
func Run(t *testing.T, l Launcher) {
	for _, tc := range cases() {
		for _, n := range l.Sizes() {
			if n < tc.minSize {
				continue
			}
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				if o, ok := l.(OneGoroutine); ok && o.OneGoroutinePerRank() && concurrent[tc.name] {
					t.Skip("this backend runs each rank on one goroutine (its documented contract): the case drives a rank from two")
				}
				if o, ok := l.(FloatOrder); ok && !o.RankOrderFloats() && rankOrder[tc.name] {
					t.Skip("this launcher's reductions are MPI's own algorithms, whose order MPI does not promise")
				}
				ctx, cancel := context.WithTimeout(context.Background(), caseBound)
				defer cancel()
				if err := l.Launch(ctx, n, tc.opts, tc.fn(n)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func errorf(c comm.Comm, format string, args ...any) error {
	return fmt.Errorf("rank %d/%d: %s", c.Rank(), c.Size(), fmt.Sprintf(format, args...))
}

func cases() []testCase {
	checked := Options{Checked: true, Timeout: 20 * time.Second}
	return []testCase{
		{"RankSize", 1, Options{}, rankSize},
		{"Barrier", 1, Options{}, barrier},
		{"Allreduce", 1, Options{}, allreduce},
		{"AllreduceChecked", 1, checked, allreduce},
		{"AllgatherVariable", 1, Options{}, allgather},
		{"AllgatherChecked", 1, checked, allgather},
		{"Bcast", 1, Options{}, bcast},
		{"BcastChecked", 1, checked, bcast},
		{"Split", 1, Options{}, split},
		{"SplitChecked", 1, checked, split},
		{"PointToPoint", 1, Options{}, p2pRing},
		{"PointToPointOrderAndWildcards", 2, Options{}, p2pOrder},
		{"PointToPointTruncated", 2, Options{}, p2pTruncated},
		{"PointToPointParts", 2, Options{}, p2pParts},
		{"PointToPointPartsChecked", 2, checked, p2pParts},
		{"PointToPointWithCollectives", 2, checked, p2pWithCollectives},
		{"ContextCancellation", 1, Options{}, cancellation},
		{"BadArguments", 1, checked, badArguments},
		{"Closed", 1, Options{}, closed},
		{"Typed", 1, Options{}, typedAll},
		{"TypedChecked", 1, checked, typedAll},
		{"TypedFloatRankOrder", 1, Options{}, typedFloatRankOrder},
		{"TypedBadArguments", 1, checked, typedBadArguments},
		{"TypedBadArgumentsUnchecked", 1, Options{}, typedBadArguments},
		{"TypedDesyncDatatype", 2, Options{Checked: true, Timeout: 10 * time.Second}, typedDesync},
		{"TypedDesyncCount", 2, Options{Checked: true, Timeout: 10 * time.Second}, typedDesyncCount},
		{"TypedMismatchedCounts", 2, Options{Checked: true, Timeout: 10 * time.Second}, typedMismatch},
		{"DesyncDifferentKinds", 2, Options{Checked: true, Timeout: 10 * time.Second}, desyncKinds},
		{"DesyncSameKindDifferentSite", 2, Options{Checked: true, Timeout: 10 * time.Second}, desyncSites},
		{"DesyncAllreduceCount", 2, Options{Checked: true, Timeout: 10 * time.Second}, desyncCount},
		{"DesyncSameSiteDifferentBranch", 2, Options{Checked: true, Timeout: 10 * time.Second}, desyncBranches},
		{"DesyncNamesGuards", 2, Options{Checked: true, Timeout: 10 * time.Second}, desyncGuards},
		{"TimeoutNamesMissingRank", 2, Options{Checked: true, Timeout: 500 * time.Millisecond}, timeoutMissing},
		{"UncheckedTimeoutNamesMissingRank", 2, Options{Timeout: 500 * time.Millisecond}, uncheckedTimeoutMissing},
		{"GraceExtendsTheBound", 2, Options{Timeout: 300 * time.Millisecond}, graceExtends},
		{"GraceExtendsTheBoundChecked", 2, Options{Checked: true, Timeout: 300 * time.Millisecond}, graceExtends},
	}
}

func rankSize(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		if c.Size() != n || c.Rank() < 0 || c.Rank() >= n {
			return errorf(c, "rank/size = %d/%d, want size %d", c.Rank(), c.Size(), n)
		}
		// Every rank reports its rank; the sum must be n(n-1)/2 and the
		// ranks distinct (max of rank bit set covers n <= 63).
		out := []int64{0}
		if err := c.AllreduceInt64(ctx, comm.Sum, []int64{int64(c.Rank())}, out); err != nil {
			return err
		}
		if out[0] != int64(n*(n-1)/2) {
			return errorf(c, "sum of ranks %d, want %d", out[0], n*(n-1)/2)
		}
		if c.Name() == "" {
			return errorf(c, "empty group name")
		}
		return nil
	}
}

func barrier(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		for range 50 {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

func allreduce(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		r := int64(c.Rank())
		in := []int64{r + 1, -r, 1 << uint(c.Rank()%62), ^(int64(1) << uint(c.Rank()%62))}
		var sum, mn, mx, or, and [4]int64
		for i := range 4 {
			sum[i], mn[i], mx[i], or[i], and[i] = 0, 1<<62, -1<<62, 0, -1
		}
		for q := range int64(n) {
			v := []int64{q + 1, -q, 1 << uint(q%62), ^(int64(1) << uint(q%62))}
			for i := range 4 {
				sum[i] += v[i]
				mn[i] = min(mn[i], v[i])
				mx[i] = max(mx[i], v[i])
				or[i] |= v[i]
				and[i] &= v[i]
			}
		}
		for _, tc := range []struct {
			op   comm.ReduceOp
			want [4]int64
		}{{comm.Sum, sum}, {comm.Min, mn}, {comm.Max, mx}, {comm.BitOr, or}, {comm.BitAnd, and}} {
			out := make([]int64, 4)
			if err := c.AllreduceInt64(ctx, tc.op, in, out); err != nil {
				return err
			}
			if !slices.Equal(out, tc.want[:]) {
				return errorf(c, "allreduce %s = %v, want %v", tc.op, out, tc.want)
			}
		}
		// In place.
		buf := []int64{1, 2}
		if err := c.AllreduceInt64(ctx, comm.Sum, buf, buf); err != nil {
			return err
		}
		if buf[0] != int64(n) || buf[1] != int64(2*n) {
			return errorf(c, "in-place allreduce = %v", buf)
		}
		// Zero length.
		if err := c.AllreduceInt64(ctx, comm.Max, []int64{}, []int64{}); err != nil {
			return errorf(c, "zero-length allreduce: %v", err)
		}
		if err := c.AllreduceInt64(ctx, comm.Max, nil, nil); err != nil {
			return errorf(c, "nil allreduce: %v", err)
		}
		return nil
	}
}

func gatherContribution(rank, round int) []int64 {
	k := (rank*7 + round*3) % 65 // 0..64 values, zero included
	if round == 0 {
		k = 0 // everyone contributes nothing once
	}
	v := make([]int64, k)
	for i := range v {
		v[i] = int64(rank*1000000 + round*1000 + i)
	}
	return v
}

func allgather(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		var g comm.Gathered
		for round := range 12 {
			if err := c.AllgatherInt64s(ctx, gatherContribution(c.Rank(), round), &g); err != nil {
				return err
			}
			if len(g.Counts) != n {
				return errorf(c, "round %d: %d counts, want %d", round, len(g.Counts), n)
			}
			total := 0
			for q := range n {
				want := gatherContribution(q, round)
				if !slices.Equal(g.Of(q), want) {
					return errorf(c, "round %d: rank %d contributed %v, want %v", round, q, g.Of(q), want)
				}
				total += len(want)
			}
			if len(g.Flat) != total {
				return errorf(c, "round %d: flat has %d values, want %d", round, len(g.Flat), total)
			}
		}
		return nil
	}
}

func bcast(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		var buf []byte
		for root := range n {
			for _, size := range []int{0, 1, 1000, 70000} {
				var data []byte
				if c.Rank() == root {
					data = bytes.Repeat([]byte{byte(root + size)}, size)
				} else {
					data = buf
				}
				got, err := c.Bcast(ctx, root, data)
				if err != nil {
					return err
				}
				want := bytes.Repeat([]byte{byte(root + size)}, size)
				if !bytes.Equal(got, want) {
					return errorf(c, "bcast root %d size %d: got %d bytes", root, size, len(got))
				}
				if c.Rank() != root {
					buf = got
				}
			}
		}
		return nil
	}
}

func split(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		color := c.Rank() % 2
		// Reverse order by key.
		sub, err := c.Split(ctx, color, -c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		var members []int
		for q := n - 1; q >= 0; q-- {
			if q%2 == color {
				members = append(members, q)
			}
		}
		if sub.Size() != len(members) || members[sub.Rank()] != c.Rank() {
			return errorf(c, "split color %d: rank %d of %d, want position of %d in %v", color, sub.Rank(), sub.Size(), c.Rank(), members)
		}
		// Collectives on the child see only its members.
		var g comm.Gathered
		if err := sub.AllgatherInt64s(ctx, []int64{int64(c.Rank())}, &g); err != nil {
			return err
		}
		for i, m := range members {
			if g.Of(i)[0] != int64(m) {
				return errorf(c, "child allgather %v, want %v", g.Flat, members)
			}
		}
		// Names agree within a child and differ between children.
		nameSum := int64(0)
		for _, ch := range sub.Name() {
			nameSum = nameSum*31 + int64(ch)
		}
		mx := []int64{0, 0}
		if err := sub.AllreduceInt64(ctx, comm.Max, []int64{nameSum, -nameSum}, mx); err != nil {
			return err
		}
		if mx[0] != nameSum || -mx[1] != nameSum {
			return errorf(c, "child name %q differs between members", sub.Name())
		}
		if sub.Name() == c.Name() {
			return errorf(c, "child has its parent's name %q", sub.Name())
		}
		// Nested split of the child, and the parent still works.
		one, err := sub.Split(ctx, 0, 0)
		if err != nil {
			return err
		}
		defer one.Close()
		if one.Size() != sub.Size() {
			return errorf(c, "nested split size %d, want %d", one.Size(), sub.Size())
		}
		if err := one.Barrier(ctx); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// Point to point on the child uses child ranks.
		if sub.Size() > 1 {
			next := (sub.Rank() + 1) % sub.Size()
			prev := (sub.Rank() + sub.Size() - 1) % sub.Size()
			rb := make([]byte, 8)
			st, err := ring(ctx, sub, []byte(fmt.Sprintf("%08d", sub.Rank())), rb, next, prev, 3)
			if err != nil {
				return err
			}
			if st.Source != prev || string(rb) != fmt.Sprintf("%08d", prev) {
				return errorf(c, "child ring: got %q from %d, want from %d", rb, st.Source, prev)
			}
		}
		return nil
	}
}

// ring posts a receive of in from prev, sends out to next (same tag) and
// waits for both; it returns the receive's status.
func ring(ctx context.Context, c comm.Comm, out, in []byte, next, prev, tag int) (comm.Status, error) {
	rq, err := c.Irecv(in, prev, tag)
	if err != nil {
		return comm.Status{}, err
	}
	sq, err := c.Isend(out, next, tag)
	if err != nil {
		return comm.Status{}, err
	}
	st, err := rq.Wait(ctx)
	if err != nil {
		return st, err
	}
	_, err = sq.Wait(ctx)
	return st, err
}

func p2pRing(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		next := (c.Rank() + 1) % n
		prev := (c.Rank() + n - 1) % n
		for _, size := range []int{0, 1, 4096, 1 << 20} {
			out := bytes.Repeat([]byte{byte(c.Rank() + size)}, size)
			in := make([]byte, size)
			st, err := ring(ctx, c, out, in, next, prev, 7)
			if err != nil {
				return err
			}
			if st.Source != prev || st.Tag != 7 || st.Len != size {
				return errorf(c, "status %+v, want source %d tag 7 len %d", st, prev, size)
			}
			if !bytes.Equal(in, bytes.Repeat([]byte{byte(prev + size)}, size)) {
				return errorf(c, "size %d: wrong bytes from %d", size, prev)
			}
		}
		return nil
	}
}

func p2pOrder(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		const msgs = 20
		if c.Rank() == 1 {
			var reqs []comm.Request
			for i := range msgs {
				q, err := c.Isend([]byte{byte(i)}, 0, 5)
				if err != nil {
					return err
				}
				reqs = append(reqs, q)
			}
			q, err := c.Isend([]byte("x"), 0, 6)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
			for _, q := range reqs {
				if _, err := q.Wait(ctx); err != nil {
					return err
				}
			}
		}
		if c.Rank() == 0 {
			// The tag-6 message can be received first with a specific
			// tag even though it was sent last.
			b := make([]byte, 1)
			q, err := c.Irecv(b, 1, 6)
			if err != nil {
				return err
			}
			if _, err := q.Wait(ctx); err != nil {
				return err
			}
			// Same sender, same tag: non-overtaking order, with wildcards.
			for i := range msgs {
				q, err := c.Irecv(b, comm.AnySource, comm.AnyTag)
				if err != nil {
					return err
				}
				st, err := q.Wait(ctx)
				if err != nil {
					return err
				}
				if b[0] != byte(i) || st.Source != 1 || st.Tag != 5 {
					return errorf(c, "message %d: got %d status %+v", i, b[0], st)
				}
			}
		}
		return c.Barrier(ctx)
	}
}

func p2pTruncated(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		switch c.Rank() {
		case 0:
			q, err := c.Isend(make([]byte, 100), 1, 9)
			if err != nil {
				return err
			}
			if _, err := q.Wait(ctx); err != nil {
				return errorf(c, "send of a truncated message: %v", err)
			}
		case 1:
			q, err := c.Irecv(make([]byte, 10), 0, 9)
			if err != nil {
				return err
			}
			_, err = q.Wait(ctx)
			if !errors.Is(err, comm.ErrTruncated) {
				return errorf(c, "receive into a short buffer: err %v, want ErrTruncated", err)
			}
		}
		return c.Barrier(ctx)
	}
}

// p2pParts: vectored sends and receives (comm.Vectored) carry the
// concatenation of their parts, mix with plain calls either way, cross
// MPI's large-message protocol, and a receive too small is ErrTruncated.
// Nil parts, like no parts, are an empty message on every backend (the
// zero value works; MPI used to refuse it where the in-process backend
// took it). Backends without vectored I/O pass it trivially.
func p2pParts(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		v := comm.PropsOf(c).Vectored
		if v == nil {
			return nil
		}
		big := make([]byte, 1<<20)
		for i := range big {
			big[i] = byte(i*7 + i>>10)
		}
		switch c.Rank() {
		case 0:
			var qs []comm.Request
			for _, post := range []func() (comm.Request, error){
				func() (comm.Request, error) { return v.IsendParts([][]byte{[]byte("ab"), {}, []byte("cdef")}, 1, 21) },
				func() (comm.Request, error) { return c.Isend([]byte("plain-msg"), 1, 22) },
				func() (comm.Request, error) { return v.IsendParts([][]byte{[]byte("xy"), []byte("z")}, 1, 23) },
				func() (comm.Request, error) { return v.IsendParts([][]byte{make([]byte, 20)}, 1, 24) },
				func() (comm.Request, error) {
					return v.IsendParts([][]byte{big[:1<<18], big[1<<18 : 3<<18], big[3<<18:]}, 1, 25)
				},
				func() (comm.Request, error) { return v.IsendParts(nil, 1, 26) },
				func() (comm.Request, error) { return v.IsendParts([][]byte{}, 1, 27) },
			} {
				q, err := post()
				if err != nil {
					return err
				}
				qs = append(qs, q)
			}
			for _, q := range qs {
				if _, err := q.Wait(ctx); err != nil {
					return errorf(c, "vectored send: %v", err)
				}
			}
		case 1:
			a, b := make([]byte, 3), make([]byte, 10)
			st, err := waitRecv(ctx, func() (comm.Request, error) { return v.IrecvParts([][]byte{a, b}, 0, 21) })
			if err != nil || st.Len != 6 || string(a) != "abc" || string(b[:3]) != "def" {
				return errorf(c, "parts into parts: len %d, %q %q, %v", st.Len, a, b[:3], err)
			}
			p, q := make([]byte, 4), make([]byte, 5)
			st, err = waitRecv(ctx, func() (comm.Request, error) { return v.IrecvParts([][]byte{p, q}, 0, 22) })
			if err != nil || st.Len != 9 || string(p)+string(q) != "plain-msg" {
				return errorf(c, "plain send into parts: len %d, %q %q, %v", st.Len, p, q, err)
			}
			buf := make([]byte, 8)
			st, err = waitRecv(ctx, func() (comm.Request, error) { return c.Irecv(buf, 0, 23) })
			if err != nil || st.Len != 3 || string(buf[:3]) != "xyz" {
				return errorf(c, "parts into a plain receive: len %d, %q, %v", st.Len, buf[:st.Len], err)
			}
			_, err = waitRecv(ctx, func() (comm.Request, error) { return v.IrecvParts([][]byte{make([]byte, 5), make([]byte, 5)}, 0, 24) })
			if !errors.Is(err, comm.ErrTruncated) {
				return errorf(c, "20 bytes into 10 bytes of parts: %v, want ErrTruncated", err)
			}
			got := make([]byte, len(big))
			st, err = waitRecv(ctx, func() (comm.Request, error) { return v.IrecvParts([][]byte{got[:5], got[5:]}, 0, 25) })
			if err != nil || st.Len != len(big) || !bytes.Equal(got, big) {
				return errorf(c, "1 MiB in three parts into two: len %d, equal %v, %v", st.Len, bytes.Equal(got, big), err)
			}
			st, err = waitRecv(ctx, func() (comm.Request, error) { return v.IrecvParts(nil, 0, 26) })
			if err != nil || st.Len != 0 {
				return errorf(c, "nil parts into nil parts: len %d, %v, want an empty message", st.Len, err)
			}
			st, err = waitRecv(ctx, func() (comm.Request, error) { return c.Irecv(make([]byte, 4), 0, 27) })
			if err != nil || st.Len != 0 {
				return errorf(c, "no parts into a plain receive: len %d, %v, want an empty message", st.Len, err)
			}
		}
		return c.Barrier(ctx)
	}
}

func waitRecv(ctx context.Context, post func() (comm.Request, error)) (comm.Status, error) {
	q, err := post()
	if err != nil {
		return comm.Status{}, err
	}
	return q.Wait(ctx)
}

func p2pWithCollectives(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		// One goroutine streams messages around the ring while the rank's
		// main goroutine runs collectives on the same communicator.
		const msgs = 200
		next := (c.Rank() + 1) % n
		prev := (c.Rank() + n - 1) % n
		var wg sync.WaitGroup
		var p2pErr error
		wg.Go(func() {
			for i := range msgs {
				in := make([]byte, 8)
				rq, err := c.Irecv(in, prev, 11)
				if err != nil {
					p2pErr = err
					return
				}
				sq, err := c.Isend([]byte(fmt.Sprintf("%08d", i)), next, 11)
				if err != nil {
					p2pErr = err
					return
				}
				for {
					_, done, err := rq.Test()
					if err != nil {
						p2pErr = err
						return
					}
					if done {
						break
					}
					if _, err := rq.Wait(ctx); err != nil {
						p2pErr = err
						return
					}
				}
				if _, err := sq.Wait(ctx); err != nil {
					p2pErr = err
					return
				}
				if string(in) != fmt.Sprintf("%08d", i) {
					p2pErr = errorf(c, "message %d: got %q", i, in)
					return
				}
			}
		})
		out := []int64{0}
		for i := range 200 {
			if err := c.AllreduceInt64(ctx, comm.Sum, []int64{int64(i)}, out); err != nil {
				wg.Wait()
				return err
			}
			if out[0] != int64(i*n) {
				wg.Wait()
				return errorf(c, "allreduce %d = %d", i, out[0])
			}
		}
		wg.Wait()
		return p2pErr
	}
}

func cancellation(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		// A receive nobody answers: Wait returns the context's error, the
		// request stays pending and can then be cancelled.
		q, err := c.Irecv(make([]byte, 4), c.Rank(), 13)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = q.Wait(wctx)
		if !errors.Is(err, context.Canceled) {
			return errorf(c, "wait under an ended context: %v, want its error (context.Canceled)", err)
		}
		if _, done, _ := q.Test(); done {
			return errorf(c, "request completed after a context error")
		}
		if err := q.Cancel(); err != nil {
			return errorf(c, "cancel pending receive: %v", err)
		}
		// A self-send is matched by a later receive.
		sq, err := c.Isend([]byte("self"), c.Rank(), 14)
		if err != nil {
			return err
		}
		b := make([]byte, 4)
		rq, err := c.Irecv(b, c.Rank(), 14)
		if err != nil {
			return err
		}
		if _, err := rq.Wait(ctx); err != nil {
			return err
		}
		if _, err := sq.Wait(ctx); err != nil {
			return err
		}
		if string(b) != "self" {
			return errorf(c, "self message %q", b)
		}
		if err := sq.Cancel(); !errors.Is(err, comm.ErrNotCancelled) {
			return errorf(c, "cancel of a completed send: %v, want ErrNotCancelled", err)
		}
		// Not asserted: whether a collective entered with a context that
		// already ended fails. A round that can complete at once may
		// complete (in-process it does not read the context), and a rank
		// that gives up alone breaks its peers' round.
		return nil
	}
}

func badArguments(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		bad := func(what string, err error) error {
			if !errors.Is(err, comm.ErrBadArgument) {
				return errorf(c, "%s: err %v, want ErrBadArgument", what, err)
			}
			return nil
		}
		_, e1 := c.Isend([]byte{1}, -1, 0)
		_, e2 := c.Isend([]byte{1}, n, 0)
		_, e3 := c.Isend([]byte{1}, 0, -5)
		_, e4 := c.Irecv(make([]byte, 1), 0, comm.MaxTag+1)
		_, e5 := c.Isend(nil, 0, 0)
		_, e6 := c.Irecv(nil, 0, 0)
		e7 := c.AllreduceInt64(ctx, comm.ReduceOp(99), []int64{1}, []int64{1})
		e8 := c.AllreduceInt64(ctx, comm.Sum, []int64{1, 2}, []int64{1})
		_, e9 := c.Split(ctx, -1, 0)
		_, e10 := c.Bcast(ctx, n, nil)
		e11 := c.AllgatherInt64s(ctx, nil, nil)
		for i, e := range []error{e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11} {
			if err := bad(fmt.Sprintf("case %d", i+1), e); err != nil {
				return err
			}
		}
		// Rejected arguments leave the communicator usable and in step.
		return c.Barrier(ctx)
	}
}

func closed(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		sub, err := c.Split(ctx, 0, 0)
		if err != nil {
			return err
		}
		if err := sub.Close(); err != nil {
			return err
		}
		if err := sub.Close(); err != nil {
			return errorf(c, "second Close: %v", err)
		}
		if err := sub.Barrier(ctx); !errors.Is(err, comm.ErrClosed) {
			return errorf(c, "barrier after close: %v, want ErrClosed", err)
		}
		if _, err := sub.Isend([]byte{1}, 0, 0); !errors.Is(err, comm.ErrClosed) {
			return errorf(c, "isend after close: %v, want ErrClosed", err)
		}
		return nil
	}
}

// expectDesync checks a desync error seen by rank c: it must wrap
// ErrDesync, be reported within bound, and name every want fragment.
func expectDesync(c comm.Comm, err error, start time.Time, want ...string) error {
	if !errors.Is(err, comm.ErrDesync) {
		return errorf(c, "err %v, want ErrDesync", err)
	}
	var de *comm.DesyncError
	if !errors.As(err, &de) {
		return errorf(c, "err %T does not carry a *comm.DesyncError", err)
	}
	if len(de.Entries) != c.Size() {
		return errorf(c, "desync lists %d ranks, want %d", len(de.Entries), c.Size())
	}
	if d := clock.Since(comm.PropsOf(c).Clock, start); d > 5*time.Second {
		return errorf(c, "desync reported after %v", d)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			return errorf(c, "desync error %q does not mention %q", err, w)
		}
	}
	// The group is now broken: the next collective fails fast.
	if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrBroken) {
		return errorf(c, "collective after desync: %v, want ErrBroken", err)
	}
	return nil
}

func desyncKinds(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		start := comm.PropsOf(c).Clock.Now()
		var err error
		if c.Rank() == 0 {
			err = c.Barrier(ctx) // the odd one out
		} else {
			var g comm.Gathered
			err = c.AllgatherInt64s(ctx, []int64{1, 2, 3}, &g)
		}
		return expectDesync(c, err, start, "Barrier", "Allgather", "suite.go:", "desyncKinds")
	}
}

func desyncSites(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		start := comm.PropsOf(c).Clock.Now()
		out := []int64{0}
		var err error
		// Same kind, same shape, different line: MPI would pair these
		// silently; checked mode must not.
		if c.Rank()%2 == 0 {
			err = c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out) // site A
		} else {
			err = c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out) // site B
		}
		var de *comm.DesyncError
		if errors.As(err, &de) && de.Entries[0].Site == de.Entries[1].Site {
			return errorf(c, "both entries name the same site %q", de.Entries[0].Site)
		}
		return expectDesync(c, err, start, "Allreduce")
	}
}

func desyncCount(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		start := comm.PropsOf(c).Clock.Now()
		k := 1
		if c.Rank() == n-1 {
			k = 2
		}
		in := make([]int64, k)
		err := c.AllreduceInt64(ctx, comm.Sum, in, in) // one site, different counts
		return expectDesync(c, err, start, "count 1", "count 2")
	}
}

// sharedSite is one collective call site reached from two branches, as a
// status check is from two branches of an executor loop.
//
//go:noinline
func sharedSite(ctx context.Context, c comm.Comm) error {
	out := []int64{0}
	return c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out)
}

func desyncBranches(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		start := comm.PropsOf(c).Clock.Now()
		var err error
		// Same kind, shape and immediate call site; the branches that
		// reach it differ. Stamping only the immediate caller would pair
		// them silently.
		if c.Rank()%2 == 0 {
			err = sharedSite(ctx, c) // branch A
		} else {
			err = sharedSite(ctx, c) // branch B
		}
		var de *comm.DesyncError
		if errors.As(err, &de) && de.Entries[0].Site == de.Entries[1].Site {
			return errorf(c, "both entries name the same site %q", de.Entries[0].Site)
		}
		return expectDesync(c, err, start, "Allreduce", "sharedSite", "call paths part at")
	}
}

// desyncGuards: the ranks decide on a rank-local value (the last rank's
// differs), record it as a guard, and enter different collectives; every
// rank's desync names each side's value and where it was recorded. Guards
// recorded before an earlier collective are not carried into this one.
func desyncGuards(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		start := comm.PropsOf(c).Clock.Now()
		comm.PropsOf(c).Recorder.Guard("stale", 7) // kept with the barrier below, not the desync
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		fits := int64(1)
		if c.Rank() == n-1 {
			fits = 0
		}
		comm.PropsOf(c).Recorder.Guard("fits", fits)
		comm.PropsOf(c).Recorder.GuardBool("busy", c.Rank() == 0)
		var err error
		if fits == 1 {
			var g comm.Gathered
			err = c.AllgatherInt64s(ctx, []int64{1}, &g)
		} else {
			err = c.Barrier(ctx)
		}
		if err != nil && strings.Contains(err.Error(), "stale") {
			return errorf(c, "desync names a guard of an earlier collective: %v", err)
		}
		var de *comm.DesyncError
		if errors.As(err, &de) {
			for _, en := range de.Entries {
				want := "fits=1"
				if en.Rank == n-1 {
					want = "fits=0"
				}
				if g := flight.GuardsText(en.Guards); !strings.Contains(g, want) || !strings.Contains(g, "suite.go:") {
					return errorf(c, "rank %d's entry has guards %q, want %s and where it was recorded", en.Rank, g, want)
				}
			}
		}
		// Ranks 0..n-2 entered the allgather, rank 0 busy and the others
		// not: one clause, the differing value shown as its range.
		busy := "busy=true at"
		if n > 2 {
			busy = "busy=false|true at"
		}
		return expectDesync(c, err, start, "after fits=1 at commtest/suite.go:", "after fits=0 at commtest/suite.go:", busy, "busy=false at", "desyncGuards")
	}
}

func timeoutMissing(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		stalled := n - 1
		if c.Rank() == stalled {
			comm.PropsOf(c).Recorder.Guard("sessions", 1) // why it went to its receive instead
			// The stall: this rank waits in rank-local work (a receive)
			// until rank 0 has seen its timeout and releases it.
			b := make([]byte, 1)
			q, err := c.Irecv(b, 0, 21)
			if err != nil {
				return err
			}
			_, err = q.Wait(ctx)
			return err
		}
		start := comm.PropsOf(c).Clock.Now()
		err := c.Barrier(ctx)
		elapsed := clock.Since(comm.PropsOf(c).Clock, start)
		var verdict error
		var te *comm.TimeoutError
		switch {
		case !errors.Is(err, comm.ErrCollectiveTimeout):
			verdict = errorf(c, "err %v, want ErrCollectiveTimeout", err)
		case !errors.As(err, &te):
			verdict = errorf(c, "err %T does not carry *comm.TimeoutError", err)
		case !slices.Equal(te.Missing, []int{stalled}):
			verdict = errorf(c, "missing ranks %v, want [%d] (%v)", te.Missing, stalled, err)
		case elapsed > 10*time.Second:
			verdict = errorf(c, "timeout reported after %v", elapsed)
		case !strings.Contains(err.Error(), fmt.Sprintf("[%d] never arrived", stalled)):
			verdict = errorf(c, "error %q does not name rank %d", err, stalled)
		case !strings.Contains(te.FlightLog(), "Irecv peer 0 tag 21"):
			verdict = errorf(c, "flight log does not show the stalled rank's receive:\n%s", te.FlightLog())
		case !strings.Contains(err.Error(), fmt.Sprintf("since then rank %d recorded sessions=1 at commtest/suite.go:", stalled)):
			verdict = errorf(c, "error %q does not name the stalled rank's guard value", err)
		}
		return errors.Join(verdict, releaseStalled(ctx, c, stalled, 21))
	}
}

// releaseStalled ends a timeout case: every rank but the stalled one tells
// rank 0 it has seen its timeout; rank 0 then releases the stalled rank (a
// one-byte message with tag) and lets the others go. Released earlier, a
// rank could leave (closing its communicator) while a slower one still
// asks it for its records, and that one would report it missing too.
func releaseStalled(ctx context.Context, c comm.Comm, stalled, tag int) error {
	if c.Rank() != 0 {
		if err := p2pSend(ctx, c, 0, 23); err != nil {
			return err
		}
		return p2pRecv(ctx, c, 0, 24)
	}
	for range c.Size() - 2 {
		if err := p2pRecv(ctx, c, comm.AnySource, 23); err != nil {
			return err
		}
	}
	for r := 1; r < c.Size(); r++ {
		if r != stalled {
			if err := p2pSend(ctx, c, r, 24); err != nil {
				return err
			}
		}
	}
	return p2pSend(ctx, c, stalled, tag)
}

// uncheckedTimeoutSlack is how long past its bound a backend may take to
// report a timeout: it asks its peers which ranks never arrived first.
const uncheckedTimeoutSlack = 3 * time.Second

// uncheckedTimeoutMissing: a backend that bounds its collectives itself
// (comm.PropsOf(c).Timeout) bounds them in unchecked mode too. One rank stays in
// rank-local work; the others' allreduce fails within the slack of the
// bound with a *comm.TimeoutError that names the missing rank and the
// operation, and leaves the group broken. Not before the bound: the rank
// whose own bound passed first breaks the group for all, so a rank that
// entered after it hears of the timeout up to that lag early (a loaded
// host made it 0.1 ms); what holds on any host is that some rank waited
// its whole bound, which rank 0 checks from every waiting rank's word. Backends that do not
// bound their collectives (comm.PropsOf(c).Timeout == 0) pass trivially: in
// unchecked mode they wait for the caller's context.
func uncheckedTimeoutMissing(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		bound := comm.PropsOf(c).Timeout
		if bound <= 0 {
			return nil
		}
		stalled := n - 1
		if c.Rank() == stalled {
			b := make([]byte, 1)
			q, err := c.Irecv(b, 0, 22)
			if err != nil {
				return err
			}
			_, err = q.Wait(ctx)
			return err
		}
		start := comm.PropsOf(c).Clock.Now()
		out := []int64{0}
		err := c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out)
		elapsed := clock.Since(comm.PropsOf(c).Clock, start)
		var verdict error
		var te *comm.TimeoutError
		switch {
		case !errors.Is(err, comm.ErrCollectiveTimeout):
			verdict = errorf(c, "unchecked allreduce with rank %d missing: err %v, want ErrCollectiveTimeout", stalled, err)
		case !errors.As(err, &te):
			verdict = errorf(c, "err %T does not carry *comm.TimeoutError", err)
		case !slices.Equal(te.Missing, []int{stalled}):
			verdict = errorf(c, "missing ranks %v, want [%d] (%v)", te.Missing, stalled, err)
		case te.Group != c.Name() || te.Self != c.Rank() || te.Waiting.Kind != flight.KindAllreduce || te.Waiting.Seq == 0:
			verdict = errorf(c, "timeout names group %q rank %d, %s #%d; want group %q rank %d, Allreduce #>0",
				te.Group, te.Self, te.Waiting.Kind, te.Waiting.Seq, c.Name(), c.Rank())
		case elapsed > bound+uncheckedTimeoutSlack:
			verdict = errorf(c, "timeout reported after %v, bound %v + %v", elapsed, bound, uncheckedTimeoutSlack)
		case !strings.Contains(err.Error(), fmt.Sprintf("[%d] never arrived", stalled)):
			verdict = errorf(c, "error %q does not name rank %d", err, stalled)
		}
		if verdict == nil {
			if err := c.Barrier(ctx); !errors.Is(err, comm.ErrBroken) {
				verdict = errorf(c, "collective after a timeout: %v, want ErrBroken", err)
			}
		}
		full, err := anyWaitedFull(ctx, c, stalled, elapsed >= bound)
		if err == nil && c.Rank() == 0 && !full {
			verdict = errors.Join(verdict, errorf(c, "every waiting rank heard of the timeout before its bound %v (rank 0 after %v)", bound, elapsed))
		}
		return errors.Join(verdict, err, releaseStalled(ctx, c, stalled, 22))
	}
}

// anyWaitedFull tells rank 0 whether any rank but stalled waited its whole
// bound (full, on each rank's own clock): every other rank sends it its
// flag (tag 25).
func anyWaitedFull(ctx context.Context, c comm.Comm, stalled int, full bool) (bool, error) {
	if c.Rank() != 0 {
		v := byte(0)
		if full {
			v = 1
		}
		q, err := c.Isend([]byte{v}, 0, 25)
		if err != nil {
			return false, err
		}
		_, err = q.Wait(ctx)
		return false, err
	}
	for r := 1; r < c.Size(); r++ {
		if r == stalled {
			continue
		}
		b := make([]byte, 1)
		q, err := c.Irecv(b, r, 25)
		if err != nil {
			return false, err
		}
		if _, err := q.Wait(ctx); err != nil {
			return false, err
		}
		full = full || b[0] == 1
	}
	return full, nil
}

// p2pSend sends one byte to dest with tag and waits for the send.
func p2pSend(ctx context.Context, c comm.Comm, dest, tag int) error {
	q, err := c.Isend([]byte{1}, dest, tag)
	if err != nil {
		return err
	}
	_, err = q.Wait(ctx)
	return err
}

// p2pRecv receives one byte from src with tag.
func p2pRecv(ctx context.Context, c comm.Comm, src, tag int) error {
	q, err := c.Irecv(make([]byte, 1), src, tag)
	if err != nil {
		return err
	}
	_, err = q.Wait(ctx)
	return err
}

// graceExtends: the last rank does rank-local work for twice the
// collective bound before it enters an allreduce; its peers enter at
// once, with a grace of four bounds (comm.WithGrace): the allreduce
// completes on every rank, where without the grace they would time out
// (UncheckedTimeoutNamesMissingRank). The sync GEN receive (a peer inside
// its blocking receive, bounded by the transfer deadline) is this shape.
// Backends that do not bound their collectives pass trivially.
func graceExtends(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		bound := comm.PropsOf(c).Timeout
		if bound <= 0 {
			return nil
		}
		if c.Rank() == n-1 {
			if err := clock.Sleep(ctx, comm.PropsOf(c).Clock, 2*bound); err != nil {
				return err
			}
		}
		out := []int64{0}
		if err := c.AllreduceInt64(comm.WithGrace(ctx, 4*bound), comm.Sum, []int64{1}, out); err != nil {
			return errorf(c, "allreduce with a grace of %v over a bound of %v, the last rank %v late: %v", 4*bound, bound, 2*bound, err)
		}
		if out[0] != int64(n) {
			return errorf(c, "sum %d, want %d", out[0], n)
		}
		return nil
	}
}
