package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// Rank reports travel to world rank 0 when every rank has finished; a
// rank that finishes early (another DP replica still working) waits for
// rank 0 under the run's own deadline (ctx), not a fixed bound.

// RunRank runs one rank of a disaggregated run on world (every CTX rank,
// then every GEN rank). It is collective over world. World rank 0 returns
// the merged Report; the other ranks return nil. Every rank returns its
// own report, as far as it got (what it measured up to a failure, for a
// partial report: see Partial), and its own error.
func RunRank(ctx context.Context, world comm.Comm, cfg Config) (*Report, RankReport, error) {
	var mine RankReport
	rep, err := runRank(ctx, world, cfg, func(rr RankReport, _ error) { mine = rr })
	return rep, mine, err
}

// runRank is one rank's run; keep is handed the rank's own report and how
// it ended before it returns.
func runRank(ctx context.Context, world comm.Comm, cfg Config, keep func(RankReport, error)) (*Report, error) {
	if cfg.Clock == nil {
		cfg.Clock = comm.PropsOf(world).Clock // a simulated world's virtual clock
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if world.Size() != cfg.Ranks() {
		return nil, fmt.Errorf("%w: the world has %d ranks but ctx %s + gen %s need %d", ErrConfig, world.Size(), cfg.Ctx, cfg.Gen, cfg.Ranks())
	}
	// One agreed start time: world rank 0's clock, broadcast; with a trace,
	// its digest of the requests too.
	t0b := make([]byte, 8, 16)
	binary.LittleEndian.PutUint64(t0b, uint64(cfg.Clock.Now().UnixNano()))
	traced := cfg.Workload.Arrival.Kind == Traced
	digest := cfg.Workload.digest()
	if traced {
		t0b = binary.LittleEndian.AppendUint64(t0b, digest)
	}
	got, err := world.Bcast(ctx, 0, t0b)
	if err != nil {
		return nil, fmt.Errorf("executor: start: %w", err)
	}
	t0 := time.Unix(0, int64(binary.LittleEndian.Uint64(got)))
	if traced {
		if err := agreeTrace(ctx, world, &cfg, binary.LittleEndian.Uint64(got[8:]), digest); err != nil {
			return nil, err
		}
	}

	ctl, err := world.Split(ctx, 0, world.Rank())
	if err != nil {
		return nil, fmt.Errorf("executor: control communicator: %w", err)
	}
	defer ctl.Close()
	g, err := newGroups(ctx, world, &cfg)
	if err != nil {
		return nil, err
	}
	defer g.close()

	rep, runErr := runLoop(ctx, world, ctl, g, &cfg, t0)
	if runErr != nil {
		// A failed rank does not wait for reports: its peers are being
		// cancelled (in-process) or aborted (MPI) by the caller.
		keep(rep, runErr)
		return nil, runErr
	}
	r, err := collect(ctx, world, ctl, &cfg, rep, t0)
	keep(rep, err)
	return r, err
}

// agreeTrace fails every rank alike, naming the ranks, unless every rank
// replays the requests world rank 0 does (digest root's, mine this
// rank's): under mpirun each process reads the trace file itself, and a
// rank with another file (another folder, an edited copy) would route or
// expect other requests and hang.
func agreeTrace(ctx context.Context, world comm.Comm, cfg *Config, root, mine uint64) error {
	in := make([]int64, world.Size())
	if root != mine {
		in[world.Rank()] = 1
	}
	out := make([]int64, len(in))
	if err := world.AllreduceInt64(ctx, comm.Sum, in, out); err != nil {
		return fmt.Errorf("executor: start: agreeing on the trace: %w", err)
	}
	var differ []int
	for r, v := range out {
		if v != 0 {
			differ = append(differ, r)
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: world ranks %v replay other requests than world rank 0 from --arrival %s (each process reads the file itself: give every rank the same file)",
			ErrConfig, differ, cfg.Workload.Arrival)
	}
	return nil
}

// newGroups splits world into this rank's instance, its executor group and
// its consensus scope. Collective over world, in the same order on every
// rank.
func newGroups(ctx context.Context, world comm.Comm, cfg *Config) (groups, error) {
	role, rank := topology.RoleOf(cfg.Ctx, cfg.Gen, world.Rank())
	g := groups{role: role, rank: rank}
	layout := cfg.Ctx
	if role == topology.Generation {
		layout = cfg.Gen
	}
	var err error
	if g.inst, err = world.Split(ctx, int(role), rank); err != nil {
		return g, fmt.Errorf("executor: split the %s instance: %w", role, err)
	}
	g.named()
	// The executor group: the whole instance under attention-DP, else the
	// rank's DP replica (contiguous: its first rank names it).
	first, size := 0, layout.Ranks()
	if !layout.AttentionDP {
		first, size = layout.Coord(rank).DP*layout.ReplicaRanks(), layout.ReplicaRanks()
	}
	if g.exec, err = g.inst.Split(ctx, first, rank); err != nil {
		g.close()
		return g, fmt.Errorf("executor: split %s executor group of rank %d: %w", role, first, err)
	}
	if g.exec.Size() != size {
		g.close()
		return g, fmt.Errorf("executor: split %s executor group of rank %d gave %d ranks, want %d", role, first, g.exec.Size(), size)
	}
	if g.scope, err = transceiver.Scopes(ctx, g.inst, role, layout); err != nil {
		g.close()
		return g, err
	}
	if g.ep, err = newDispatcher(ctx, g.inst, layout, rank, cfg.Routing, cfg.Model.TokensPerBlock, cfg.routes); err != nil {
		g.close()
		return g, err
	}
	return g, nil
}

func runLoop(ctx context.Context, world, ctl comm.Comm, g groups, cfg *Config, t0 time.Time) (RankReport, error) {
	layout, blocks := cfg.Ctx, cfg.CtxBlocks
	if g.role == topology.Generation {
		layout, blocks = cfg.Gen, cfg.GenBlocks
	}
	faults := faultsFor(cfg.Faults, g.role, g.rank)
	if faults.blocks > 0 {
		blocks = faults.blocks
	}
	if g.ep != nil {
		g.ep.misroute = faults.misroute
	}
	shard, err := layout.Shard(cfg.Model, g.rank)
	if err != nil {
		return RankReport{}, err
	}
	log := cfg.Log.With(zap.Int("rank", world.Rank()), zap.String("role", g.role.String()), zap.Int("instance_rank", g.rank),
		zap.String("group", g.exec.Name()))
	pool, err := kvpool.NewPool(kvpool.PoolConfig{Blocks: blocks, BlockBytes: shard.BlockBytes(), Name: fmt.Sprintf("%s-%d", g.role, g.rank), Arena: cfg.arena})
	if err != nil {
		return RankReport{}, err
	}
	tr, err := transceiver.New(transceiver.Config{Role: g.role, Ctx: cfg.Ctx, Gen: cfg.Gen, Model: cfg.Model, Rank: g.rank,
		World: world, Scope: g.scope, Pool: pool, SenderWaitSlice: cfg.SenderWaitSlice, Clock: cfg.Clock,
		GenPollInterval: cfg.GenPollInterval, TransferTimeout: cfg.TransferTimeout, Verify: cfg.Verify,
		Replays: transceiver.Replays{UnclampedPoll: cfg.Replays.On(UnclampedPoll), DeadlinesWhenBusy: cfg.Replays.On(DeadlinesWhenBusy),
			SilentStartFailure: cfg.Replays.On(SilentStartFailure)}, Log: log, Faults: faults.tx})
	if err != nil {
		return RankReport{}, err
	}
	l := &loop{cfg: cfg, world: world, ctl: ctl, g: g, tr: tr, pool: pool, shard: tr.Shard(), layout: layout, faults: faults, log: log, t0: t0,
		clk: cfg.Clock, waiter: cfg.Clock.NewWaiter(), peerBound: peerBound(world),
		leader: g.exec.Rank() == 0, myDP: layout.Coord(g.rank).DP, stalled: map[request.ID]bool{}, progressAt: cfg.Clock.Now(),
		ctlChan: ctlChan{ctlBuf: make([]byte, recBytes)}, idleState: idleState{tickBuf: make([]byte, 1), wakeBuf: make([]byte, 1)},
		audit: comm.PropsOf(world).Checked, pending: func() bool { return false }}
	defer l.waiter.Stop()
	l.rec = recorderOf(g, world)
	l.rep = RankReport{WorldRank: world.Rank(), Role: g.role.String(), Rank: g.rank, Leader: l.leader, PoolBlocks: blocks}
	// How many requests this executor group handles: all of them under
	// attention-DP, else those of its DP index.
	for i := range cfg.Workload.Requests {
		if layout.AttentionDP || i%layout.DP == l.myDP {
			l.expected++
		}
	}
	if world.Rank() == 0 {
		l.router = newRouter(cfg.Workload, cfg.Ctx.DP, cfg.Gen.DP)
	}
	if err := l.postCtl(); err != nil {
		return l.rep, err
	}
	log.Debug("executor starting", zap.Int("expected", l.expected), zap.Int("pool_blocks", blocks), zap.Int("block_bytes", shard.BlockBytes()))
	if g.role == topology.Context {
		err = (&ctxLoop{loop: l}).run(ctx)
	} else {
		// Under attention-DP every rank of a request's DP index reports
		// its outcome to the group (shareOutcomes); otherwise the scope's
		// verdict is the group's.
		holders := 1
		if layout.AttentionDP && layout.DP > 1 {
			holders = layout.ReplicaRanks()
		}
		err = newGenLoop(l, holders).run(ctx)
	}
	if err != nil && cfg.DumpDir != "" {
		path, derr := l.writeDump(err)
		if derr != nil {
			err = errors.Join(err, derr)
		} else {
			log.Debug("failure dump written", zap.String("path", path))
		}
	}
	fctx := ctx
	if err != nil {
		// A failed rank does not wait for its peers to take its pending
		// messages: they may be waiting in a collective for it, and its
		// error (the cause) must reach the caller before their timeouts.
		c, cancel := context.WithCancel(ctx)
		cancel()
		fctx = c
	}
	cerr := l.finish(fctx)
	if err != nil && cerr != nil {
		// What a failed rank could not finish (its pending messages, on
		// a context it cancelled itself) follows from its failure: it
		// rides along in the message, but only err says what the rank's
		// error is (errors.Is: a cleanup's context.Canceled must not make
		// the rank's own error look like a consequence of another's).
		cerr = afterFailure{cerr}
	}
	return l.rep, errors.Join(err, cerr)
}

// afterFailure is what a failed rank's cleanup reported: shown, not
// unwrapped.
type afterFailure struct{ err error }

func (a afterFailure) Error() string { return a.err.Error() }

// finish drains this rank's own messages, closes the transceiver and checks
// the pool: zero used, zero pinned, invariants hold.
func (l *loop) finish(ctx context.Context) error {
	var errs []error
	// Our sends must complete before we go (the receivers are still
	// running until they, too, finish), within the peer bound.
	for _, q := range l.outbox {
		if _, err := l.waitPeer(ctx, q, comm.AnySource, "a pending message to be received"); err != nil {
			errs = append(errs, fmt.Errorf("executor: pending message: %w", err))
			break
		}
	}
	l.outbox = nil
	if l.ctlReq != nil {
		if err := l.ctlReq.Cancel(); err != nil {
			errs = append(errs, fmt.Errorf("executor: cancel message receive: %w", err))
		}
	}
	if l.tickReq != nil {
		_ = l.tickReq.Cancel()
	}
	if l.wakeReq != nil {
		_ = l.wakeReq.Cancel()
	}
	if err := l.tr.Close(); err != nil {
		errs = append(errs, err)
	}
	st := l.tr.Stats()
	l.rep.Collectives = st.Collectives
	l.rep.Checked = l.audit
	l.rep.BytesSent, l.rep.BytesReceived, l.rep.BytesChecked = st.BytesSent, st.BytesReceived, st.BytesVerified
	l.rep.MaxPollWaitNs = st.MaxPollWait.Nanoseconds()
	l.rep.CancelRefused = st.CancelRefused
	ps := l.pool.Stats()
	l.rep.UsedAtEnd, l.rep.PinnedAtEnd = ps.Used, ps.Pinned
	l.rep.PeakUsed, l.rep.PeakPinned = max(l.rep.PeakUsed, ps.PeakUsed), max(l.rep.PeakPinned, ps.PeakPinned)
	if err := l.pool.CheckInvariants(); err != nil {
		l.rep.InvariantError = err.Error()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// peerBound is the bound of a point-to-point wait on a peer: the world's
// collective timeout when its backend bounds collectives, else the default.
func peerBound(world comm.Comm) time.Duration {
	if d := comm.PropsOf(world).Timeout; d > 0 {
		return d
	}
	return comm.DefaultCollectiveTimeout
}

// World is a backend that runs every rank of a run in this process:
// launch.Local (a goroutine per rank) or launch.Sim (virtual time).
// executor imports no backend; its caller picks one.
type World interface {
	// RunWorld runs rank on each of n ranks, handing each its
	// communicator over the whole world and its clock (clk, or the
	// rank's virtual clock where the world keeps time itself), and
	// returns once every rank has returned: the first rank's error (the
	// cause; the others were cancelled by it) and how long the world ran
	// by that clock.
	RunWorld(ctx context.Context, n int, clk clock.Clock, rank func(context.Context, comm.Comm, clock.Clock) error) (time.Duration, error)
}

// Run runs a whole disaggregated run on w and returns the merged report.
// On failure it returns the first rank's error with a partial report:
// what every rank measured up to then, its Error set. Under launch.Sim
// every time figure of the report is virtual, and the same cfg and
// sim.Config give the same report.
func Run(ctx context.Context, cfg Config, w World) (*Report, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: executor.Run: nil World (launch.Local or launch.Sim)", ErrConfig)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.routes, cfg.steps = newRouteMemo(), newStepMemo()
	cfg.arena = kvpool.NewArena()
	defer cfg.arena.Free() // after RunWorld: no rank, event or message reads a block again
	var rep *Report
	out := newRankOutcomes(cfg.Ranks())
	elapsed, err := w.RunWorld(ctx, cfg.Ranks(), cfg.Clock, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
		rc := cfg
		rc.Clock = clk
		r, err := runRank(ctx, c, rc, func(rr RankReport, err error) { out.keep(ctx, c.Rank(), rr, err) })
		if c.Rank() == 0 && r != nil {
			rep = r
		}
		return err
	})
	if err != nil {
		return out.partial(&cfg, err, elapsed.Seconds()), err
	}
	return rep, nil
}
