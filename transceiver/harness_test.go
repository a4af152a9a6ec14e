package transceiver_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testModel = topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}

// counting counts the collectives entered through a communicator and every
// communicator split from it (one counter per rank), so a test can assert
// that a rank-local path entered none, whichever group it would have used.
type counting struct {
	comm.Comm
	n *atomic.Int64
}

func newCounting(c comm.Comm) *counting { return &counting{Comm: c, n: new(atomic.Int64)} }

// Unwrap keeps the backend's capabilities (completion events) reachable.
func (c *counting) Unwrap() comm.Comm { return c.Comm }

func (c *counting) Barrier(ctx context.Context) error { c.n.Add(1); return c.Comm.Barrier(ctx) }
func (c *counting) AllreduceInt64(ctx context.Context, op comm.ReduceOp, in, out []int64) error {
	c.n.Add(1)
	return c.Comm.AllreduceInt64(ctx, op, in, out)
}
func (c *counting) AllgatherInt64s(ctx context.Context, in []int64, out *comm.Gathered) error {
	c.n.Add(1)
	return c.Comm.AllgatherInt64s(ctx, in, out)
}
func (c *counting) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	c.n.Add(1)
	return c.Comm.Bcast(ctx, root, data)
}
func (c *counting) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	c.n.Add(1)
	child, err := c.Comm.Split(ctx, color, key)
	if err != nil {
		return nil, err
	}
	return &counting{Comm: child, n: c.n}, nil
}

// packing hides the backend's lending and vectored I/O (comm.PropsOf(c).Lender and
// PropsOf find capabilities that say no) and keeps its other
// capabilities reachable.
type packing struct{ comm.Comm }

func (p packing) Unwrap() comm.Comm { return p.Comm }
func (packing) LendsBytes() bool    { return false }
func (packing) VectorIO() bool      { return false }
func (packing) IsendParts([][]byte, int, int) (comm.Request, error) {
	return nil, errors.New("packing: IsendParts called although LendsBytes and VectorIO are false")
}
func (packing) IrecvParts([][]byte, int, int) (comm.Request, error) {
	return nil, errors.New("packing: IrecvParts called although VectorIO is false")
}
func (packing) IrecvLoan(int, int) (comm.Loan, error) {
	return nil, errors.New("packing: IrecvLoan called although LendsBytes is false")
}

// vectoring hides the backend's lending only: bytes go from the CTX blocks
// into the GEN blocks through vectored sends and receives, as over MPI.
type vectoring struct{ comm.Comm }

func (v vectoring) Unwrap() comm.Comm { return v.Comm }
func (vectoring) LendsBytes() bool    { return false }
func (vectoring) IsendParts([][]byte, int, int) (comm.Request, error) {
	return nil, errors.New("vectoring: IsendParts reached the wrapper (PropsOf should find the backend's)")
}
func (vectoring) IrecvLoan(int, int) (comm.Loan, error) {
	return nil, errors.New("vectoring: IrecvLoan called although LendsBytes is false")
}

// groups are one rank's communicators: its instance and its consensus
// scope (transceiver.Scopes), as the executor builds them.
type groups struct {
	Role  topology.Role
	Rank  int // within the instance
	Inst  comm.Comm
	Scope []comm.Comm
}

func (g *groups) Close() {
	transceiver.CloseAll(g.Scope)
	g.Inst.Close()
}

// setupGroups splits world (every CTX rank, then every GEN rank) into the
// calling rank's instance and consensus scope. Collective over world.
func setupGroups(ctx context.Context, world comm.Comm, ctxL, genL topology.Layout) (*groups, error) {
	role, rank := topology.RoleOf(ctxL, genL, world.Rank())
	inst, err := world.Split(ctx, int(role), rank)
	if err != nil {
		return nil, err
	}
	layout := ctxL
	if role == topology.Generation {
		layout = genL
	}
	scope, err := transceiver.Scopes(ctx, inst, role, layout)
	if err != nil {
		inst.Close()
		return nil, err
	}
	return &groups{Role: role, Rank: rank, Inst: inst, Scope: scope}, nil
}

// rank is what a test body gets on each rank.
type rank struct {
	t      *testing.T
	tr     *transceiver.Transceiver
	pool   *kvpool.Pool
	groups *groups
	world  *counting
	role   topology.Role
}

type setupOpts struct {
	ctx, gen   string
	blocks     int
	slice      time.Duration
	genPoll    time.Duration
	timeout    time.Duration
	replays    transceiver.Replays
	faults     func(role topology.Role, rank int) *transceiver.Faults
	collTimout time.Duration
	verify     transceiver.Verify
	// path is how KV bytes travel: "" (lent, the local backend's way),
	// "vector" (sent from and received into the blocks, MPI's way), or
	// "pack" (packed and copied, the simulator's way).
	path string
	// clock is every rank's clock (the real one when nil). A frozen
	// clock.Manual proves a wait ended on an event: a wait on a deadline
	// would never end, and the test would fail at its own bound.
	clock clock.Clock
	// bound is the whole test's wall-clock bound (60 s when 0).
	bound time.Duration
}

// runRanks builds a checked in-process world for the two layouts and runs
// body on every rank with its transceiver; it fails the test on any error
// and checks every pool ends empty and consistent.
func runRanks(t *testing.T, o setupOpts, body func(ctx context.Context, r *rank) error) {
	t.Helper()
	ctxL := topology.MustParseLayout(o.ctx)
	genL := topology.MustParseLayout(o.gen)
	if o.blocks == 0 {
		o.blocks = 256
	}
	if o.collTimout == 0 {
		o.collTimout = 20 * time.Second
	}
	if o.bound == 0 {
		o.bound = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.bound)
	defer cancel()
	err := local.Run(ctx, ctxL.Ranks()+genL.Ranks(), local.Config{Checked: true, Timeout: o.collTimout}, func(ctx context.Context, c comm.Comm) error {
		world := newCounting(c)
		var xworld comm.Comm = world
		switch o.path {
		case "vector":
			xworld = vectoring{world}
		case "pack":
			xworld = packing{world}
		}
		g, err := setupGroups(ctx, world, ctxL, genL)
		if err != nil {
			return err
		}
		defer g.Close()
		layout := ctxL
		if g.Role == topology.Generation {
			layout = genL
		}
		shard, err := layout.Shard(testModel, g.Rank)
		if err != nil {
			return err
		}
		pool, err := kvpool.NewPool(kvpool.PoolConfig{Blocks: o.blocks, BlockBytes: shard.BlockBytes(), Name: g.Role.String()})
		if err != nil {
			return err
		}
		var faults *transceiver.Faults
		if o.faults != nil {
			faults = o.faults(g.Role, g.Rank)
		}
		tr, err := transceiver.New(transceiver.Config{Role: g.Role, Ctx: ctxL, Gen: genL, Model: testModel, Rank: g.Rank,
			World: xworld, Scope: g.Scope, Pool: pool, SenderWaitSlice: o.slice, GenPollInterval: o.genPoll,
			TransferTimeout: o.timeout, Replays: o.replays, Faults: faults, Clock: o.clock, Verify: o.verify})
		if err != nil {
			return err
		}
		r := &rank{t: t, tr: tr, pool: pool, groups: g, world: world, role: g.Role}
		berr := body(ctx, r)
		cerr := tr.Close()
		if berr != nil {
			return berr
		}
		if cerr != nil {
			return cerr
		}
		if err := pool.CheckInvariants(); err != nil {
			return err
		}
		if st := pool.Stats(); st.Used != 0 || st.Pinned != 0 {
			return errorf("%s rank %d: pool ends with %d used, %d pinned blocks", g.Role, g.Rank, st.Used, st.Pinned)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
