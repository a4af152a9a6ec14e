package commtest

// The typed collectives (comm/typed.go) against a reference computed here,
// naively, from the same inputs: every operation x datatype x reduction, at
// every group size a launcher runs (1, odd sizes, split groups under
// mpirun). Inputs are small integers (as floats too), so every sum, product,
// minimum and maximum is exact whatever order a backend reduces in (MPI
// promises none).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// typedMatrix counts what one rank checked, for the caller's report.
type typedMatrix struct{ cases int }

// val is rank r's i-th input element for a reduction op: small, so that
// products of up to 8 ranks stay exact in every type.
func val[T comm.Element](r, i int, op comm.ReduceOp) T {
	if op == comm.Prod {
		return T(1 + (r+i)%2)
	}
	return T(1 + (r*7+i*3)%11)
}

// refReduce is element i of the reduction of every rank's input.
func refReduce[T comm.Element](n, i int, op comm.ReduceOp) T {
	acc := val[T](0, i, op)
	for r := 1; r < n; r++ {
		v := val[T](r, i, op)
		switch op {
		case comm.Sum:
			acc += v
		case comm.Prod:
			acc *= v
		case comm.Min:
			acc = min(acc, v)
		case comm.Max:
			acc = max(acc, v)
		default:
			a, b := toU64(acc), toU64(v)
			switch op {
			case comm.BitOr:
				a |= b
			case comm.BitAnd:
				a &= b
			case comm.BitXor:
				a ^= b
			}
			acc = T(a)
		}
	}
	return acc
}

func toU64[T comm.Element](v T) uint64 { return uint64(v) }

// reductionsOf lists the reductions that apply to T.
func reductionsOf[T comm.Element]() []comm.ReduceOp {
	if typed.DatatypeOf[T]().Float() {
		return []comm.ReduceOp{comm.Sum, comm.Prod, comm.Min, comm.Max}
	}
	return []comm.ReduceOp{comm.Sum, comm.Prod, comm.Min, comm.Max, comm.BitOr, comm.BitAnd, comm.BitXor}
}

// typedAll runs every typed collective over every datatype on c.
func typedAll(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		var m typedMatrix
		all := func(g comm.Comm) error {
			for _, f := range []func(context.Context, comm.Comm, *typedMatrix) error{
				typedOps[byte], typedOps[int32], typedOps[int64], typedOps[uint64], typedOps[float32], typedOps[float64],
			} {
				if err := f(ctx, g, &m); err != nil {
					return fmt.Errorf("group %q (rank %d of %d): %w", g.Name(), g.Rank(), g.Size(), err)
				}
			}
			return nil
		}
		if err := all(c); err != nil {
			return err
		}
		// Group shapes beyond the world: a split into evens and odds in
		// reverse key order (odd sizes and size 1 on odd worlds), and a
		// duplicate of the world.
		sub, err := c.Split(ctx, c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		if err := all(sub); err != nil {
			return err
		}
		dup, err := comm.Dup(ctx, c)
		if err != nil {
			return err
		}
		defer dup.Close()
		if err := all(dup); err != nil {
			return err
		}
		if m.cases == 0 {
			return errorf(c, "no typed case ran")
		}
		return c.Barrier(ctx)
	}
}

func typedOps[T comm.Element](ctx context.Context, c comm.Comm, m *typedMatrix) error {
	n, me := c.Size(), c.Rank()
	dt := typed.DatatypeOf[T]()
	fail := func(what string, got, want any) error {
		return errorf(c, "%s %s: got %v, want %v", dt, what, got, want)
	}
	const k = 5 // elements per rank and block
	// Reductions.
	for _, op := range reductionsOf[T]() {
		in := make([]T, k)
		for i := range in {
			in[i] = val[T](me, i, op)
		}
		want := make([]T, k)
		for i := range want {
			want[i] = refReduce[T](n, i, op)
		}
		out := make([]T, k)
		if err := comm.Allreduce(ctx, c, op, in, out); err != nil {
			return fmt.Errorf("%s allreduce %s: %w", dt, op, err)
		}
		if !slices.Equal(out, want) {
			return fail("allreduce "+op.String(), out, want)
		}
		// In place: the input buffer is the output.
		inplace := slices.Clone(in)
		if err := comm.Allreduce(ctx, c, op, inplace, inplace); err != nil {
			return fmt.Errorf("%s allreduce %s in place: %w", dt, op, err)
		}
		if !slices.Equal(inplace, want) {
			return fail("allreduce in place "+op.String(), inplace, want)
		}
		for root := range n {
			got := make([]T, k)
			var dst []T
			if me == root {
				dst = got
			}
			if err := comm.Reduce(ctx, c, op, root, in, dst); err != nil {
				return fmt.Errorf("%s reduce %s root %d: %w", dt, op, root, err)
			}
			if me == root && !slices.Equal(got, want) {
				return fail(fmt.Sprintf("reduce %s root %d", op, root), got, want)
			}
		}
		// Reduce-scatter: rank r keeps block r (r+1 elements) of the
		// reduction of n(n+1)/2 elements.
		counts := make([]int, n)
		total := 0
		for r := range n {
			counts[r] = r + 1
			total += r + 1
		}
		rsIn := make([]T, total)
		for i := range rsIn {
			rsIn[i] = val[T](me, i, op)
		}
		rsOut := make([]T, counts[me])
		if err := comm.ReduceScatter(ctx, c, op, rsIn, rsOut, counts); err != nil {
			return fmt.Errorf("%s reduce-scatter %s: %w", dt, op, err)
		}
		at := me * (me + 1) / 2
		for i := range rsOut {
			if w := refReduce[T](n, at+i, op); rsOut[i] != w {
				return fail(fmt.Sprintf("reduce-scatter %s element %d", op, i), rsOut[i], w)
			}
		}
		m.cases += 3 + n
	}
	mine := func(r, k int) []T {
		s := make([]T, k)
		for i := range s {
			s[i] = T(r*16 + i + 1)
		}
		return s
	}
	// Bcast from every root.
	for root := range n {
		buf := make([]T, k)
		if me == root {
			copy(buf, mine(root, k))
		}
		if err := comm.BcastOf(ctx, c, root, buf); err != nil {
			return fmt.Errorf("%s bcast root %d: %w", dt, root, err)
		}
		if !slices.Equal(buf, mine(root, k)) {
			return fail(fmt.Sprintf("bcast root %d", root), buf, mine(root, k))
		}
	}
	// Allgather and allgatherv (rank r contributes r%3 elements, packed
	// after a gap of one element per rank).
	var wantAll []T
	for r := range n {
		wantAll = append(wantAll, mine(r, k)...)
	}
	out := make([]T, n*k)
	if err := comm.Allgather(ctx, c, mine(me, k), out); err != nil {
		return fmt.Errorf("%s allgather: %w", dt, err)
	}
	if !slices.Equal(out, wantAll) {
		return fail("allgather", out, wantAll)
	}
	counts, displs := make([]int, n), make([]int, n)
	at := 0
	for r := range n {
		counts[r], displs[r] = r%3, at+1
		at += r%3 + 1
	}
	vout := make([]T, at)
	if err := comm.Allgatherv(ctx, c, mine(me, counts[me]), vout, counts, displs); err != nil {
		return fmt.Errorf("%s allgatherv: %w", dt, err)
	}
	for r := range n {
		if got := vout[displs[r] : displs[r]+counts[r]]; !slices.Equal(got, mine(r, counts[r])) {
			return fail(fmt.Sprintf("allgatherv from rank %d", r), got, mine(r, counts[r]))
		}
		if vout[displs[r]-1] != 0 {
			return fail(fmt.Sprintf("allgatherv gap before rank %d", r), vout[displs[r]-1], 0)
		}
	}
	// Gather, gatherv, scatter, scatterv at every root.
	for root := range n {
		var gout []T
		if me == root {
			gout = make([]T, n*k)
		}
		if err := comm.Gather(ctx, c, root, mine(me, k), gout); err != nil {
			return fmt.Errorf("%s gather root %d: %w", dt, root, err)
		}
		if me == root && !slices.Equal(gout, wantAll) {
			return fail(fmt.Sprintf("gather root %d", root), gout, wantAll)
		}
		var gvout []T
		if me == root {
			gvout = make([]T, at)
		}
		if err := comm.Gatherv(ctx, c, root, mine(me, counts[me]), gvout, counts, displs); err != nil {
			return fmt.Errorf("%s gatherv root %d: %w", dt, root, err)
		}
		if me == root {
			for r := range n {
				if got := gvout[displs[r] : displs[r]+counts[r]]; !slices.Equal(got, mine(r, counts[r])) {
					return fail(fmt.Sprintf("gatherv root %d from rank %d", root, r), got, mine(r, counts[r]))
				}
			}
		}
		var sin []T
		if me == root {
			sin = wantAll
		}
		sout := make([]T, k)
		if err := comm.Scatter(ctx, c, root, sin, sout); err != nil {
			return fmt.Errorf("%s scatter root %d: %w", dt, root, err)
		}
		if !slices.Equal(sout, mine(me, k)) {
			return fail(fmt.Sprintf("scatter root %d", root), sout, mine(me, k))
		}
		if me == root {
			sin = vout
		}
		svout := make([]T, counts[me])
		if err := comm.Scatterv(ctx, c, root, sin, svout, counts, displs); err != nil {
			return fmt.Errorf("%s scatterv root %d: %w", dt, root, err)
		}
		if !slices.Equal(svout, mine(me, counts[me])) {
			return fail(fmt.Sprintf("scatterv root %d", root), svout, mine(me, counts[me]))
		}
	}
	// Alltoall: block j of rank i's input is i*16+j*4+(0..3); rank j's
	// output block i must hold it. Alltoallv: rank i sends rank j (i+j)%3
	// elements.
	a2a := func(i, j, k int) []T {
		s := make([]T, k)
		for e := range s {
			s[e] = T(i*16 + j*4 + e)
		}
		return s
	}
	var ain, aw []T
	for j := range n {
		ain = append(ain, a2a(me, j, 3)...)
		aw = append(aw, a2a(j, me, 3)...)
	}
	aout := make([]T, len(ain))
	if err := comm.Alltoall(ctx, c, ain, aout); err != nil {
		return fmt.Errorf("%s alltoall: %w", dt, err)
	}
	if !slices.Equal(aout, aw) {
		return fail("alltoall", aout, aw)
	}
	sc, rc := make([]int, n), make([]int, n)
	var vin, vw []T
	for j := range n {
		sc[j], rc[j] = (me+j)%3, (j+me)%3
		vin = append(vin, a2a(me, j, sc[j])...)
		vw = append(vw, a2a(j, me, rc[j])...)
	}
	vo := make([]T, len(vw))
	if err := comm.Alltoallv(ctx, c, vin, sc, nil, vo, rc, nil); err != nil {
		return fmt.Errorf("%s alltoallv: %w", dt, err)
	}
	if !slices.Equal(vo, vw) {
		return fail("alltoallv", vo, vw)
	}
	// Sendrecv around a ring.
	right, left := (me+1)%n, (me+n-1)%n
	rin := make([]T, k)
	if _, err := comm.Sendrecv(ctx, c, mine(me, k), right, 7, rin, left, 7); err != nil {
		return fmt.Errorf("%s sendrecv: %w", dt, err)
	}
	if !slices.Equal(rin, mine(left, k)) {
		return fail("sendrecv from the left", rin, mine(left, k))
	}
	m.cases += 4*n + 6
	return nil
}

// typedBadArguments: a caller's mistake is the same ErrBadArgument on every
// backend, naming the argument, and nothing is exchanged (the ranks meet in
// a barrier afterwards, as they would if nothing had been entered).
// typedFloatRankOrder: float sums whose value depends on the order they
// are taken in (1 + 1e8 - 1e8 + 1 is 1 in rank order in float32, 2 if the
// two large terms meet first) come out as the rank-order sum, the same
// bits on every rank, out of place and in place.
func typedFloatRankOrder(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		if err := floatRankOrder[float32](ctx, c, 1e8); err != nil {
			return err
		}
		return floatRankOrder[float64](ctx, c, 1e17)
	}
}

func floatRankOrder[T float32 | float64](ctx context.Context, c comm.Comm, big T) error {
	x := func(r, i int) T {
		switch r {
		case 1:
			return big * T(i+1)
		case 2:
			return -big * T(i+1)
		}
		return T(1) / T(i+1)
	}
	const k = 5
	want := make([]T, k)
	for i := range want {
		acc := x(0, i)
		for r := 1; r < c.Size(); r++ {
			acc += x(r, i)
		}
		want[i] = acc
	}
	in := make([]T, k)
	for i := range in {
		in[i] = x(c.Rank(), i)
	}
	out := make([]T, k)
	if err := comm.Allreduce(ctx, c, comm.Sum, in, out); err != nil {
		return err
	}
	if err := comm.Allreduce(ctx, c, comm.Sum, in, in); err != nil {
		return err
	}
	for i := range want {
		if out[i] != want[i] || in[i] != want[i] {
			return errorf(c, "%T sum of element %d: %v (in place %v), want the rank-order sum %v", want[i], i, out[i], in[i], want[i])
		}
	}
	return nil
}

func typedBadArguments(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		short := make([]float32, 3)
		for _, tc := range []struct {
			name string
			call func() error
			want string
		}{
			{"count mismatch", func() error { return comm.Allreduce(ctx, c, comm.Sum, make([]float32, 4), short) }, "send has 4 elements, receive 3"},
			{"root out of range", func() error { return comm.Reduce(ctx, c, comm.Sum, n, short, short) }, fmt.Sprintf("root %d outside 0..%d", n, n-1)},
			{"negative root", func() error { return comm.BcastOf(ctx, c, -1, short) }, "root -1 outside"},
			{"bitwise on floats", func() error { return comm.Allreduce(ctx, c, comm.BitXor, short, short) }, "reduction bxor does not apply to float32"},
			{"counts per rank", func() error {
				return comm.Allgatherv(ctx, c, short, make([]float32, 8), make([]int, n+1), nil)
			}, "receive counts and displacements need one per rank"},
			{"buffer too short", func() error {
				counts := make([]int, n)
				for r := range counts {
					counts[r] = 3
				}
				return comm.Allgatherv(ctx, c, short, make([]float32, 3*n-1), counts, nil)
			}, "does not fit the"},
			{"negative count", func() error {
				counts := make([]int, n)
				counts[0] = -1
				return comm.Allgatherv(ctx, c, short, make([]float32, 3*n), counts, nil)
			}, "receive count -1 for rank 0: must not be negative"},
			{"negative displacement", func() error {
				counts, displs := make([]int, n), make([]int, n)
				displs[n-1] = -2
				return comm.Allgatherv(ctx, c, short, make([]float32, 3*n), counts, displs)
			}, fmt.Sprintf("receive displacement -2 for rank %d: must not be negative", n-1)},
			{"alltoall in place", func() error {
				buf := make([]float32, 2*n)
				return comm.Alltoall(ctx, c, buf, buf)
			}, "the send and receive buffers overlap (only Allreduce may run in place"},
			{"allreduce on overlapping halves", func() error {
				buf := make([]float32, 8)
				return comm.Allreduce(ctx, c, comm.Sum, buf[0:4], buf[2:6])
			}, "overlap without being the same slice"},
			{"alltoall not a multiple", func() error {
				return comm.Alltoall(ctx, c, make([]float32, n+1), make([]float32, n+1))
			}, "want the same multiple"},
		} {
			if n == 1 && tc.name == "alltoall not a multiple" {
				continue // any length is a multiple of 1
			}
			err := tc.call()
			if !errors.Is(err, comm.ErrBadArgument) || !strings.Contains(err.Error(), tc.want) {
				return errorf(c, "%s: %v, want ErrBadArgument saying %q", tc.name, err, tc.want)
			}
		}
		return c.Barrier(ctx)
	}
}

// typedDesync: ranks that enter one typed collective with another datatype
// or root get ErrDesync, in checked mode naming both (the stamp carries
// kind, datatype, reduction, root and shared counts).
func typedDesync(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		// First on a child of a split (both halves, reverse key order):
		// its report must name the datatypes too, not a stamp of its own.
		// A desync breaks the group it happens on, so the world's comes
		// last.
		sub, err := c.Split(ctx, c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		if sub.Size() >= 2 {
			if err := typedDesyncOn(ctx, sub, sub.Size()); err != nil {
				return err
			}
		}
		return typedDesyncOn(ctx, c, c.Size())
	}
}

// typedDesyncCount: the last rank reduces one element where its peers
// reduce two: ErrDesync naming both counts, not a digest of them.
func typedDesyncCount(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		count := 2
		if c.Rank() == n-1 {
			count = 1
		}
		err := comm.Allreduce(ctx, c, comm.Sum, make([]float32, count), make([]float32, count))
		if !errors.Is(err, comm.ErrDesync) {
			return errorf(c, "1 element against 2: %v, want ErrDesync", err)
		}
		if !strings.Contains(err.Error(), "(float32, sum, count 1)") || !strings.Contains(err.Error(), "(float32, sum, count 2)") {
			return errorf(c, "1 element against 2: %q names not both counts", err)
		}
		return nil
	}
}

// typedMismatch: ranks that agree on a typed collective's kind, datatype
// and root but whose counts do not pair up get a typed.MismatchError naming
// the sender and the receiver that disagree, with the collective's
// sequence number and call site (checked mode; every rank's stamp agreed):
// a Reduce whose last rank reduces more (stamped: a desync naming both
// counts), a Gatherv to root 0 whose last rank sends more, a Gatherv to the
// last rank whose rank 0 sends more, a Scatterv from the middle rank that
// sends rank 0 more than it expects, an Alltoallv whose middle rank sends
// the last rank more. Each on a duplicate of c of its own: a desync breaks
// its group.
func typedMismatch(n int) RankFunc {
	return func(ctx context.Context, c comm.Comm) error {
		last, mid, me := n-1, n/2, c.Rank()
		ones := func(k int) []int {
			out := make([]int, n)
			for i := range out {
				out[i] = 1
			}
			return out
		}
		more := func(counts []int, r int) []int { counts[r] = 2; return counts }
		gatherv := func(d comm.Comm, root, sender int) error {
			in := make([]int32, 1)
			if me == sender {
				in = make([]int32, 2)
			}
			return comm.Gatherv(ctx, d, root, in, make([]int32, n), ones(n), nil)
		}
		cases := []struct {
			name     string
			from, to int // the ranks the error must name (from: the sender)
			call     func(d comm.Comm) error
		}{
			{"gatherv to rank 0, the last rank sends 2", last, 0, func(d comm.Comm) error { return gatherv(d, 0, last) }},
			{"gatherv to the last rank, rank 0 sends 2", 0, last, func(d comm.Comm) error { return gatherv(d, last, 0) }},
			{"scatterv from the middle rank, rank 0 expects 1 of 2", mid, 0, func(d comm.Comm) error {
				counts := more(ones(n), 0)
				return comm.Scatterv(ctx, d, mid, make([]int32, n+1), make([]int32, 1), counts, nil)
			}},
			{"alltoallv, the middle rank sends the last 2", mid, last, func(d comm.Comm) error {
				send := ones(n)
				if me == mid {
					send = more(send, last)
				}
				total := 0
				for _, k := range send {
					total += k
				}
				return comm.Alltoallv(ctx, d, make([]int32, total), send, nil, make([]int32, n), ones(n), nil)
			}},
		}
		for _, tc := range cases {
			if tc.from == tc.to {
				continue // two ranks: the middle rank is the last
			}
			d, err := c.Split(ctx, 0, me)
			if err != nil {
				return err
			}
			err = tc.call(d)
			d.Close()
			var mm *typed.MismatchError
			switch {
			case !errors.As(err, &mm):
				return errorf(c, "%s: %v, want a MismatchError", tc.name, err)
			case mm.A != tc.from || mm.B != tc.to:
				return errorf(c, "%s: %q names ranks %d and %d, want %d (sender) and %d", tc.name, err, mm.A, mm.B, tc.from, tc.to)
			case mm.Seq != 1 || !strings.Contains(mm.Site, "typed.go:"):
				return errorf(c, "%s: %q: want the collective's sequence number (1) and call site", tc.name, err)
			case strings.Contains(err.Error(), "run checked"):
				return errorf(c, "%s: %q tells a checked run to run checked", tc.name, err)
			}
		}
		// Reduce's count is stamped: a desync naming both counts.
		count := 2
		if me == last {
			count = 3
		}
		err := comm.Reduce(ctx, c, comm.Sum, 0, make([]int64, count), make([]int64, count))
		var de *comm.DesyncError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "root 0, count 2)") || !strings.Contains(err.Error(), "root 0, count 3)") {
			return errorf(c, "reduce of 2 against 3: %v, want a DesyncError naming both counts", err)
		}
		return nil
	}
}

func typedDesyncOn(ctx context.Context, c comm.Comm, n int) error {
	var err error
	if c.Rank() == n-1 { // the last rank differs
		err = comm.Allreduce(ctx, c, comm.Sum, make([]float64, 2), make([]float64, 2))
	} else {
		err = comm.Allreduce(ctx, c, comm.Sum, make([]float32, 2), make([]float32, 2))
	}
	if !errors.Is(err, comm.ErrDesync) {
		return errorf(c, "float32 against float64: %v, want ErrDesync", err)
	}
	if !strings.Contains(err.Error(), "float32") || !strings.Contains(err.Error(), "float64") {
		return errorf(c, "float32 against float64: %q names not both datatypes", err)
	}
	return nil
}
