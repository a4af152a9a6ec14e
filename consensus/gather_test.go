package consensus

import (
	"context"
	"errors"
	"fmt"
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

// encodeVote is the wire form a peer sends (its normalized view).
func encodeVote(v Vote) []int64 {
	lists := [][]uint64{normalize(nil, v.Cancelled), normalize(nil, v.Failed), normalize(nil, v.Completed), normalize(nil, v.Quiesced)}
	var out []int64
	for _, l := range lists {
		out = append(out, int64(len(l)))
	}
	for _, l := range lists {
		out = appendIDs(out, l)
	}
	return out
}

func TestGatherEmptyScopeIsLocal(t *testing.T) {
	var g Gatherer
	ctx := context.Background()
	mine := []uint64{3, 1, 3}
	ids, err := g.ReadyIDs(ctx, nil, mine)
	mustNoError(t, err, "ReadyIDs")
	mustEqual(t, []uint64{1, 3}, ids, "empty scope")
	mustEqual(t, []uint64{3, 1, 3}, mine, "input modified")

	v := Vote{Cancelled: []uint64{1}, Failed: []uint64{1, 2}, Completed: []uint64{3, 2, 1}, Quiesced: []uint64{2}}
	out, err := g.Outcome(ctx, nil, v)
	mustNoError(t, err, "Outcome")
	mustEqual(t, Decide([]Vote{v}), canon(out), "empty scope")
	mustEqual(t, uint64(0), g.Collectives(), "collectives")
}

func TestGatherSkipsSizeOneHops(t *testing.T) {
	var g Gatherer
	one := &scriptComm{rank: 0, size: 1, name: "tp"}
	ids, err := g.ReadyIDs(context.Background(), []comm.Comm{one, one}, []uint64{2, 1})
	mustNoError(t, err, "ReadyIDs")
	mustEqual(t, []uint64{1, 2}, ids, "ids")
	mustEqual(t, 0, one.calls, "allgather calls on a size-1 group")
	mustEqual(t, uint64(0), g.Collectives(), "collectives")
}

func TestGatherScripted(t *testing.T) {
	peerVote := Vote{Failed: []uint64{9}, Completed: []uint64{1, 2, 9}, Quiesced: []uint64{1, 2, 9}}
	mine := Vote{Cancelled: []uint64{2}, Completed: []uint64{1, 2, 9}, Quiesced: []uint64{2, 9}}
	c := &scriptComm{rank: 1, size: 2, name: "world", peers: [][]int64{encodeVote(peerVote), nil}}
	var g Gatherer
	out, err := g.Outcome(context.Background(), []comm.Comm{c}, mine)
	mustNoError(t, err, "Outcome")
	mustEqual(t, Decide([]Vote{peerVote, mine}), canon(out), "outcome")
	mustEqual(t, Outcome{Cancelled: []uint64{2}, Failed: []uint64{9}, Completed: []uint64{1}, Quiesced: []uint64{2, 9}}, canon(out), "outcome")
	mustEqual(t, uint64(1), g.Collectives(), "collectives")
}

func TestGatherErrors(t *testing.T) {
	tp := &scriptComm{rank: 0, size: 2, name: "world/s1c0", peers: [][]int64{nil, {}}}
	broken := fmt.Errorf("rank 1 gone: %w", comm.ErrBroken)
	for _, tc := range []struct {
		name   string
		pp     *scriptComm
		ready  bool
		is     error
		substr []string
	}{
		{"comm error names hop and group", &scriptComm{size: 2, name: "world/s2c0", err: broken}, false,
			comm.ErrBroken, []string{"outcome: hop 1 of 2", `group "world/s2c0"`, "rank 1 gone"}},
		{"comm error in ready ids", &scriptComm{size: 2, name: "pp", err: broken}, true,
			comm.ErrBroken, []string{"ready ids: hop 1 of 2", `group "pp"`}},
		{"short vote", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {0, 0}}}, false,
			ErrMalformedVote, []string{"rank 1", "fewer than the 4 counts"}},
		{"counts disagree with length", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {1, 0, 0, 0}}}, false,
			ErrMalformedVote, []string{"need 5 values, have 4"}},
		{"negative count", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {-1, 1, 0, 0}}}, false,
			ErrMalformedVote, []string{"count 0 is -1"}},
		{"unsorted list", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {0, 0, 2, 0, 5, 3}}}, false,
			ErrMalformedVote, []string{"list 2", "not strictly ascending"}},
		{"unsorted ready ids", &scriptComm{size: 2, name: "pp", peers: [][]int64{nil, {4, 4}}}, true,
			ErrMalformedVote, []string{"ready ids: hop 1", "rank 1", "not strictly ascending"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Gatherer
			scope := []comm.Comm{tp, tc.pp}
			var err error
			tp.peers[1] = []int64{0, 0, 0, 0} // an empty vote
			if tc.ready {
				tp.peers[1] = []int64{} // no ready ids
				_, err = g.ReadyIDs(context.Background(), scope, []uint64{1})
			} else {
				_, err = g.Outcome(context.Background(), scope, Vote{})
			}
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
		_, err := g.Outcome(context.Background(), []comm.Comm{nil}, Vote{})
		if err == nil || !strings.Contains(err.Error(), "nil communicator") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestGatherSteadyStateAllocs checks that a reused Gatherer does not
// allocate once its buffers have grown (the backend's own cost aside).
func TestGatherSteadyStateAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	votes := genVotes(rng, 3)
	ready := genReady(rng, 3)
	ctx := context.Background()
	for _, step := range []string{"outcome", "ready"} {
		t.Run(step, func(t *testing.T) {
			tp := &scriptComm{rank: 0, size: 2, name: "tp", peers: [][]int64{nil, encodeVote(votes[1])}}
			pp := &scriptComm{rank: 0, size: 2, name: "pp", peers: [][]int64{nil, encodeVote(votes[2])}}
			if step == "ready" {
				tp.peers[1] = appendIDs(nil, normalize(nil, ready[1]))
				pp.peers[1] = appendIDs(nil, normalize(nil, ready[2]))
			}
			scope := []comm.Comm{tp, pp}
			var g Gatherer
			allocs := testing.AllocsPerRun(100, func() {
				var err error
				if step == "ready" {
					_, err = g.ReadyIDs(ctx, scope, ready[0])
				} else {
					_, err = g.Outcome(ctx, scope, votes[0])
				}
				if err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("steady-state %s allocates %.1f times per call", step, allocs)
			}
		})
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

// TestGatherMultiRank runs the collective step in-process (checked mode)
// over 1, 2 and 4 ranks, flat and in two hops, for many random rounds on
// one reused Gatherer per rank, and checks that every rank holds the flat
// reference result.
func TestGatherMultiRank(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	const rounds = 100
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
			// Every rank draws the same inputs from the same seed.
			rng := rand.New(rand.NewPCG(seed, uint64(n)))
			type round struct {
				ready     [][]uint64
				votes     []Vote
				wantReady []uint64
				wantOut   Outcome
			}
			rs := make([]round, rounds)
			for i := range rs {
				rs[i].ready = genReady(rng, n)
				rs[i].votes = genVotes(rng, n)
				rs[i].wantReady = bruteReady(rs[i].ready)
				rs[i].wantOut = bruteDecide(rs[i].votes)
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
				for i, rd := range rs {
					ids, err := g.ReadyIDs(ctx, scope, rd.ready[r])
					if err != nil {
						return fmt.Errorf("round %d: %w", i, err)
					}
					if !slices.Equal(ids, rd.wantReady) {
						return fmt.Errorf("round %d: ready ids %v, want %v (inputs %v)", i, ids, rd.wantReady, rd.ready)
					}
					out, err := g.Outcome(ctx, scope, rd.votes[r])
					if err != nil {
						return fmt.Errorf("round %d: %w", i, err)
					}
					if got := cloneOutcome(out); !outcomeEqual(got, rd.wantOut) {
						return fmt.Errorf("round %d: outcome %+v, want %+v (votes %+v)", i, got, rd.wantOut, rd.votes)
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
			if scope := tc.mode; scope == "flat" && n > 1 {
				hops = 1
			} else if scope == "hops" {
				if tc.topo.tp > 1 {
					hops++
				}
				if n/tc.topo.tp > 1 {
					hops++
				}
			}
			for r, c := range colls {
				if c != uint64(2*rounds*hops) {
					t.Errorf("rank %d entered %d collectives, want %d", r, c, 2*rounds*hops)
				}
			}
		})
	}
}

func outcomeEqual(a, b Outcome) bool {
	return slices.Equal(a.Cancelled, b.Cancelled) && slices.Equal(a.Failed, b.Failed) &&
		slices.Equal(a.Completed, b.Completed) && slices.Equal(a.Quiesced, b.Quiesced)
}

// TestGatherDivergentCallIsDetected shows why the step must be entered
// unconditionally: a rank that skips it (here: enters a barrier instead)
// makes checked mode report a desync rather than hang.
func TestGatherDivergentCallIsDetected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := local.RunAll(ctx, 2, local.Config{Checked: true, Timeout: 5 * time.Second}, func(ctx context.Context, world comm.Comm) error {
		if world.Rank() == 1 {
			return world.Barrier(ctx) // a rank-local branch: breaks the one rule
		}
		var g Gatherer
		_, err := g.Outcome(ctx, []comm.Comm{world}, Vote{})
		return err
	})
	if !errors.Is(errs[0], comm.ErrDesync) {
		t.Fatalf("rank 0: got %v, want a desync", errs[0])
	}
	if !strings.Contains(errs[0].Error(), "consensus: outcome: hop 0 of 1") {
		t.Errorf("rank 0 error does not name the hop: %v", errs[0])
	}
}
