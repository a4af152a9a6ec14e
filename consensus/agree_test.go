package consensus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

// scriptComm is a single-goroutine stand-in for one rank's communicator:
// AllgatherInt64s returns this rank's input at its own index and the
// scripted contributions of the other ranks, or a scripted error. It lets
// the error paths and the allocation count be tested without a world.
type scriptComm struct {
	rank, size int
	name       string
	peers      [][]int64 // contribution of each rank; nil entry for self
	err        error
	calls      int
}

func (c *scriptComm) Rank() int    { return c.rank }
func (c *scriptComm) Size() int    { return c.size }
func (c *scriptComm) Name() string { return c.name }

func (c *scriptComm) AllgatherInt64s(_ context.Context, in []int64, out *comm.Gathered) error {
	c.calls++
	if c.err != nil {
		return c.err
	}
	flat := out.ResetFunc(c.size, func(r int) int {
		if r == c.rank {
			return len(in)
		}
		return len(c.peers[r])
	})
	flat = flat[:0]
	for r := range c.size {
		if r == c.rank {
			flat = append(flat, in...)
		} else {
			flat = append(flat, c.peers[r]...)
		}
	}
	return nil
}

var errScriptUnused = errors.New("scriptComm: not scripted")

func (c *scriptComm) Split(context.Context, int, int) (comm.Comm, error) { return nil, errScriptUnused }
func (c *scriptComm) Barrier(context.Context) error                      { return errScriptUnused }
func (c *scriptComm) AllreduceInt64(context.Context, comm.ReduceOp, []int64, []int64) error {
	return errScriptUnused
}
func (c *scriptComm) Bcast(context.Context, int, []byte) ([]byte, error) { return nil, errScriptUnused }
func (c *scriptComm) Isend([]byte, int, int) (comm.Request, error)       { return nil, errScriptUnused }
func (c *scriptComm) Irecv([]byte, int, int) (comm.Request, error)       { return nil, errScriptUnused }
func (c *scriptComm) Close() error                                       { return nil }

// view is one rank's terminal sessions: id -> state and quiesced.
type view map[uint64]struct {
	st State
	q  bool
}

// words is v as Agree takes it: one word per id, ascending.
func (v view) words() []int64 {
	ids := slices.Sorted(maps.Keys(v))
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		out = append(out, Word(id, v[id].st, v[id].q))
	}
	return out
}

// genViews draws n ranks' views over a shared universe, biased to a common
// core so that ready sets are not always empty, every rank with its own
// extras and drops (divergent session counts), states and quiesced flags
// drawn per rank (ranks disagree).
func genViews(rng *rand.Rand, n int) []view {
	universe := 1 + rng.IntN(40)
	base := []uint64{0, 1 << 40, MaxID - 64}[rng.IntN(3)]
	core := genIDs(rng, universe, 20, base)
	vs := make([]view, n)
	for r := range vs {
		vs[r] = view{}
		ids := append(slices.Clone(core), genIDs(rng, universe, 10, base)...)
		if rng.IntN(3) == 0 && len(ids) > 0 {
			ids = ids[rng.IntN(len(ids)):]
		}
		for _, id := range ids {
			st := Completed
			switch rng.IntN(10) {
			case 0:
				st = Cancelled
			case 1:
				st = Failed
			}
			vs[r][id] = struct {
				st State
				q  bool
			}{st, rng.IntN(5) != 0}
		}
	}
	return vs
}

// twoPhase is the decision of the two-phase form: ready ids (Ready), then
// every rank's vote on them (Decide), by the brute-force references.
func twoPhase(vs []view) Outcome {
	per := make([][]uint64, len(vs))
	for r, v := range vs {
		per[r] = slices.Collect(maps.Keys(v))
	}
	ready := bruteReady(per)
	votes := make([]Vote, len(vs))
	for r, v := range vs {
		for _, id := range ready {
			switch v[id].st {
			case Cancelled:
				votes[r].Cancelled = append(votes[r].Cancelled, id)
			case Failed:
				votes[r].Failed = append(votes[r].Failed, id)
			case Completed:
				votes[r].Completed = append(votes[r].Completed, id)
			}
			if v[id].q {
				votes[r].Quiesced = append(votes[r].Quiesced, id)
			}
		}
	}
	return canon(bruteDecide(votes))
}

// asOutcome is Agree's decisions in the two-phase form's shape.
func asOutcome(ds []Decision) Outcome {
	var o Outcome
	for _, d := range ds {
		switch d.Status {
		case Cancelled:
			o.Cancelled = append(o.Cancelled, d.ID)
		case Failed:
			o.Failed = append(o.Failed, d.ID)
		case Completed:
			o.Completed = append(o.Completed, d.ID)
		}
		if d.Quiesced {
			o.Quiesced = append(o.Quiesced, d.ID)
		}
	}
	return canon(o)
}

func vote(words ...int64) []int64 { return append([]int64{voteMagic | int64(len(words))}, words...) }

func TestAgreeEmptyScopeIsLocal(t *testing.T) {
	var g Gatherer
	mine := []int64{Word(1, Cancelled, true), Word(2, Completed, false), Word(3, Failed, true)}
	ds, err := g.Agree(context.Background(), nil, mine)
	mustNoError(t, err, "Agree")
	mustEqual(t, []Decision{{1, Cancelled, true}, {2, Completed, false}, {3, Failed, true}}, ds, "empty scope")
	mustEqual(t, uint64(0), g.Collectives(), "collectives")
	one := &scriptComm{rank: 0, size: 1, name: "tp"}
	ds, err = g.Agree(context.Background(), []comm.Comm{one, one}, mine[:1])
	mustNoError(t, err, "Agree")
	mustEqual(t, []Decision{{1, Cancelled, true}}, ds, "size-1 hops")
	mustEqual(t, 0, one.calls, "allgather calls on a size-1 group")
}

func TestAgreeScripted(t *testing.T) {
	peer := vote(Word(1, Completed, true), Word(2, Completed, true), Word(9, Failed, true), Word(12, Completed, true))
	mine := []int64{Word(1, Completed, false), Word(2, Cancelled, true), Word(9, Completed, true), Word(11, Completed, true)}
	c := &scriptComm{rank: 1, size: 2, name: "world", peers: [][]int64{peer, nil}}
	var g Gatherer
	ds, err := g.Agree(context.Background(), []comm.Comm{c}, mine)
	mustNoError(t, err, "Agree")
	// 11 and 12 are over on one rank only: not ready. 1: completed on
	// both, a write still in flight here; 2: cancelled wins; 9: failed wins.
	mustEqual(t, []Decision{{1, Completed, false}, {2, Cancelled, true}, {9, Failed, true}}, ds, "decisions")
	mustEqual(t, uint64(1), g.Collectives(), "one collective for the whole check")
}

func TestAgreeErrors(t *testing.T) {
	broken := fmt.Errorf("rank 1 gone: %w", comm.ErrBroken)
	for _, tc := range []struct {
		name   string
		pp     *scriptComm
		is     error
		substr []string
	}{
		{"comm error names hop and group", &scriptComm{size: 2, name: "world/s2c0", err: broken},
			comm.ErrBroken, []string{"agree: hop 1 of 2", `group "world/s2c0"`, "rank 1 gone"}},
		{"no header", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {}}},
			ErrMalformedVote, []string{"rank 1", "not a status-check vote"}},
		{"another allgather's data", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {1, 0, 0, 0}}},
			ErrMalformedVote, []string{"rank 1", "not a status-check vote (4 values)"}},
		{"length disagrees", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {voteMagic | 3, Word(1, Completed, true)}}},
			ErrMalformedVote, []string{"not a status-check vote"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Gatherer
			tp := &scriptComm{rank: 0, size: 2, name: "world/s1c0", peers: [][]int64{nil, vote(Word(1, Completed, true), Word(7, Completed, true))}}
			_, err := g.Agree(context.Background(), []comm.Comm{tp, tc.pp}, []int64{Word(1, Completed, true), Word(7, Completed, true)})
			if !errors.Is(err, tc.is) {
				t.Fatalf("error %v does not wrap %v", err, tc.is)
			}
			for _, s := range tc.substr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			mustEqual(t, uint64(2), g.Collectives(), "collectives entered")
		})
	}
	t.Run("nil communicator", func(t *testing.T) {
		var g Gatherer
		_, err := g.Agree(context.Background(), []comm.Comm{nil}, nil)
		if err == nil || !strings.Contains(err.Error(), "nil communicator") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("own words unsorted", func(t *testing.T) {
		var g Gatherer
		_, err := g.Agree(context.Background(), nil, []int64{Word(2, Completed, true), Word(2, Failed, true)})
		if !errors.Is(err, ErrUnsorted) {
			t.Fatalf("got %v", err)
		}
	})
}

// A reused Gatherer does not allocate once its buffers have grown (the
// backend's own cost aside).
func TestAgreeSteadyStateAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	vs := genViews(rng, 3)
	tp := &scriptComm{rank: 0, size: 2, name: "tp", peers: [][]int64{nil, vote(vs[1].words()...)}}
	pp := &scriptComm{rank: 0, size: 2, name: "pp", peers: [][]int64{nil, vote(vs[2].words()...)}}
	scope := []comm.Comm{tp, pp}
	mine := vs[0].words()
	var g Gatherer
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := g.Agree(context.Background(), scope, mine); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a steady-state Agree allocates %.1f times per call", allocs)
	}
}

// topo is a world split into TP groups of tp consecutive ranks, and PP
// groups of the ranks with the same TP index.
type topo struct{ n, tp int }

func (tp topo) String() string { return fmt.Sprintf("n%d_tp%d_pp%d", tp.n, tp.tp, tp.n/tp.tp) }

// scope builds this rank's scope: TP then PP (or the world alone when
// flat, or nothing when empty).
func (tp topo) scope(ctx context.Context, world comm.Comm, mode string) ([]comm.Comm, error) {
	switch mode {
	case "empty":
		return nil, nil
	case "flat":
		return []comm.Comm{world}, nil
	}
	r := world.Rank()
	tpc, err := world.Split(ctx, r/tp.tp, r)
	if err != nil {
		return nil, err
	}
	ppc, err := world.Split(ctx, r%tp.tp, r)
	if err != nil {
		return nil, err
	}
	return []comm.Comm{tpc, ppc}, nil
}

// The one-collective form decides exactly what the two-phase form (ready
// ids, then a vote on them) decides: Agree runs in-process (checked mode)
// over 1, 2 and 4 ranks, flat and in two hops, for many random per-rank
// views on one reused Gatherer per rank, and every rank must hold the
// two-phase result of the brute-force references, in one collective per
// hop.
func TestAgreeEqualsTwoPhase(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	const rounds = 200
	for _, tc := range []struct {
		topo topo
		mode string
	}{
		{topo{1, 1}, "empty"},
		{topo{1, 1}, "flat"},
		{topo{1, 1}, "hops"},
		{topo{2, 2}, "flat"},
		{topo{2, 2}, "hops"}, // TP 2, PP 1 (skipped)
		{topo{2, 1}, "hops"}, // TP 1 (skipped), PP 2
		{topo{4, 4}, "flat"},
		{topo{4, 2}, "hops"},
		{topo{4, 1}, "hops"},
	} {
		t.Run(tc.topo.String()+"_"+tc.mode, func(t *testing.T) {
			n := tc.topo.n
			rng := rand.New(rand.NewPCG(seed, uint64(n)))
			views := make([][]view, rounds)
			want := make([]Outcome, rounds)
			for i := range views {
				views[i] = genViews(rng, n)
				want[i] = twoPhase(views[i])
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			colls := make([]uint64, n)
			errs := local.RunAll(ctx, n, local.Config{Checked: true, Timeout: 10 * time.Second}, func(ctx context.Context, world comm.Comm) error {
				scope, err := tc.topo.scope(ctx, world, tc.mode)
				if err != nil {
					return err
				}
				r := world.Rank()
				var g Gatherer
				for i, vs := range views {
					ds, err := g.Agree(ctx, scope, vs[r].words())
					if err != nil {
						return fmt.Errorf("round %d: %w", i, err)
					}
					if got := asOutcome(ds); !outcomeEqual(got, want[i]) {
						return fmt.Errorf("round %d: %+v, two-phase %+v (views %v)", i, got, want[i], vs)
					}
				}
				colls[r] = g.Collectives()
				return nil
			})
			for _, err := range errs {
				if err != nil {
					t.Errorf("seed %d: %v", seed, err)
				}
			}
			hops := 0
			if tc.mode == "flat" && n > 1 {
				hops = 1
			} else if tc.mode == "hops" {
				if tc.topo.tp > 1 {
					hops++
				}
				if n/tc.topo.tp > 1 {
					hops++
				}
			}
			for r, c := range colls {
				if c != uint64(rounds*hops) {
					t.Errorf("rank %d entered %d collectives, want %d (one per hop per check)", r, c, rounds*hops)
				}
			}
		})
	}
}

func outcomeEqual(a, b Outcome) bool {
	return slices.Equal(a.Cancelled, b.Cancelled) && slices.Equal(a.Failed, b.Failed) &&
		slices.Equal(a.Completed, b.Completed) && slices.Equal(a.Quiesced, b.Quiesced)
}

// Agree must be entered unconditionally: a rank that skips it (here: enters
// a barrier instead) makes checked mode report a desync rather than hang.
func TestAgreeDivergentCallIsDetected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := local.RunAll(ctx, 2, local.Config{Checked: true, Timeout: 5 * time.Second}, func(ctx context.Context, world comm.Comm) error {
		if world.Rank() == 1 {
			return world.Barrier(ctx) // a rank-local branch: breaks the one rule
		}
		var g Gatherer
		_, err := g.Agree(ctx, []comm.Comm{world}, nil)
		return err
	})
	if !errors.Is(errs[0], comm.ErrDesync) {
		t.Fatalf("rank 0: got %v, want a desync", errs[0])
	}
	if !strings.Contains(errs[0].Error(), "consensus: agree: hop 0 of 1") {
		t.Errorf("rank 0 error does not name the hop: %v", errs[0])
	}
}

// intersectWords against a map, over long lists of every density (the
// galloping skips runs the generated views are too small to have).
func TestIntersectWordsMatchesBrute(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	draw := func(n, span int, base uint64) []int64 {
		set := map[uint64]bool{}
		for len(set) < n {
			set[base+uint64(rng.IntN(span))] = true
		}
		var out []int64
		for _, id := range slices.Sorted(maps.Keys(set)) {
			out = append(out, Word(id, State(1+rng.IntN(3)), rng.IntN(4) != 0))
		}
		return out
	}
	for i := range 500 {
		na, nb := rng.IntN(300), rng.IntN(300)
		span := max(na, nb, 1) * (1 + rng.IntN(20))
		a, b := draw(min(na, span), span, uint64(rng.IntN(2)*span/2)), draw(min(nb, span), span, 0)
		inB := map[uint64]int64{}
		for _, w := range b {
			inB[WordID(w)] = w
		}
		var want []int64
		for _, w := range a {
			if wb, ok := inB[WordID(w)]; ok {
				want = append(want, int64(WordID(w))<<flagBits|combine(w&flagMask, wb&flagMask))
			}
		}
		// Into a separate buffer, and in place (dst = acc[:0]).
		got := intersectWords(nil, a, b)
		inPlace := slices.Clone(a)
		inPlace = intersectWords(inPlace[:0], inPlace, b)
		for _, g := range [][]int64{got, inPlace} {
			if !slices.Equal(g, want) && !(len(g) == 0 && len(want) == 0) {
				t.Fatalf("case %d: %d words x %d: got %d, want %d", i, len(a), len(b), len(g), len(want))
			}
		}
	}
}
