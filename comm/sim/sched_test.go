package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/sim"
)

// Virtual time moves only when every rank is blocked: a rank that computes
// without blocking sees the clock stand still, and a sleeping rank wakes
// exactly at its deadline, in microseconds of wall time.
func TestTimeMovesOnlyWhenEveryRankBlocks(t *testing.T) {
	start := time.Now()
	var woke, during time.Duration
	res := sim.Run(t.Context(), 2, sim.Config{Seed: 7}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
		t0 := clk.Now()
		if c.Rank() == 0 {
			if err := clock.Sleep(ctx, clk, time.Hour); err != nil {
				return err
			}
			woke = clock.Since(clk, t0)
			return nil
		}
		for range 1000 { // busy, never blocking: time cannot move
			during = max(during, clock.Since(clk, t0))
		}
		return clock.Sleep(ctx, clk, time.Millisecond)
	})
	require.NoError(t, res.Err())
	require.Equal(t, time.Hour, woke, "the sleep ends exactly at its virtual deadline")
	require.Zero(t, during, "time moved while a rank was running")
	require.Equal(t, time.Hour, res.Elapsed)
	require.Less(t, time.Since(start), 5*time.Second, "an hour of virtual time took wall time")
}

// A hang is reported the instant every rank waits with nothing that could
// wake one: the detector names every rank and what it waits on.
func TestDeadlockDetector(t *testing.T) {
	res := sim.Run(t.Context(), 3, sim.Config{Seed: 1}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
		if c.Rank() == 2 {
			return c.Barrier(ctx) // its peers never come
		}
		q, err := c.Irecv(make([]byte, 1), 1-c.Rank(), 5) // each waits for the other
		if err != nil {
			return err
		}
		_, err = q.Wait(ctx)
		return err
	})
	require.ErrorIs(t, res.Err(), sim.ErrDeadlock)
	require.NotNil(t, res.Deadlock)
	require.Zero(t, res.Deadlock.At, "found at once, not at the collective timeout")
	msg := res.Deadlock.Error()
	for _, want := range []string{"rank 0 in a wait for receive from 1 tag 5", "rank 1 in a wait for receive from 0 tag 5", "rank 2 in Barrier #1 on world"} {
		require.Contains(t, msg, want)
	}
}

// A rank that returns without entering the collective its peers wait in is
// the deadlock's cause: the report names it, with where it was last, and
// names the waiters' own operation (a checked Barrier travels as one
// Allgather of stamps; the reader wrote Barrier). Every rank position: the
// culprit first, in the middle and last.
func TestDeadlockNamesRanksThatReturned(t *testing.T) {
	for _, gone := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("rank %d returns", gone), func(t *testing.T) {
			res := sim.Run(t.Context(), 3, sim.Config{Seed: 3, Checked: true}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if c.Rank() == gone {
					return nil // leaves after one barrier
				}
				return c.Barrier(ctx)
			})
			require.ErrorIs(t, res.Err(), sim.ErrDeadlock)
			msg := res.Deadlock.Error()
			require.Contains(t, msg, fmt.Sprintf("rank %d returned at 0s without error, so it never enters what the others wait in", gone))
			require.Contains(t, msg, "(its last operation: Barrier #1 on world at ")
			for r := range 3 {
				if r == gone {
					continue
				}
				require.Contains(t, msg, fmt.Sprintf("rank %d in Barrier #2 on world at ", r))
				require.Contains(t, msg, "(the backend's Allgather #2 on world)")
			}
		})
	}
}

// With the detector off, the same state ends at the collective timeout, in
// virtual time.
func TestCollectiveTimeoutIsVirtual(t *testing.T) {
	start := time.Now()
	res := sim.Run(t.Context(), 2, sim.Config{Seed: 1, Timeout: 10 * time.Minute, NoDeadlockDetection: true},
		func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
			if c.Rank() == 1 {
				return clock.Sleep(ctx, clk, time.Hour) // never arrives
			}
			return c.Barrier(ctx)
		})
	var te *comm.TimeoutError
	require.ErrorAs(t, res.Err(), &te)
	require.Equal(t, []int{1}, te.Missing)
	require.Equal(t, 10*time.Minute, res.Elapsed, "the run ended at the timeout: rank 1's sleep was cancelled")
	require.Less(t, time.Since(start), 5*time.Second)
}

// trace runs a world whose schedule shows in what it records: every rank
// sends to every other, with jitter, and logs the order of arrivals.
func trace(t *testing.T, cfg sim.Config) string {
	var log []string
	res := sim.Run(t.Context(), 4, cfg, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
		var reqs []comm.Request
		for peer := range c.Size() {
			if peer == c.Rank() {
				continue
			}
			q, err := c.Isend([]byte{byte(c.Rank())}, peer, 3)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
		}
		for range c.Size() - 1 {
			b := make([]byte, 1)
			q, err := c.Irecv(b, comm.AnySource, 3)
			if err != nil {
				return err
			}
			if _, err := q.Wait(ctx); err != nil {
				return err
			}
			log = append(log, fmt.Sprintf("%d<-%d@%v", c.Rank(), b[0], clock.Since(clk, sim.DefaultStart)))
		}
		for _, q := range reqs {
			if _, err := q.Wait(ctx); err != nil {
				return err
			}
		}
		return c.Barrier(ctx)
	})
	require.NoError(t, res.Err())
	return strings.Join(log, " ")
}

// One seed, one run: the same seed gives the same schedule, byte for byte;
// other seeds give other schedules.
func TestSameSeedSameRun(t *testing.T) {
	cfg := sim.Config{Seed: 42, Jitter: 50 * time.Microsecond}
	a, b := trace(t, cfg), trace(t, cfg)
	require.Equal(t, a, b)
	differ := false
	for seed := uint64(1); seed < 20 && !differ; seed++ {
		cfg.Seed = seed
		differ = trace(t, cfg) != a
	}
	require.True(t, differ, "twenty seeds gave one schedule: the seed does not drive the scheduler")
	pct := cfg
	pct.Strategy = sim.PCT
	require.Equal(t, trace(t, pct), trace(t, pct))
}

// The link model: a message of n bytes takes latency + n/bandwidth; a
// collective takes its algorithm's time; later messages on a pair never
// overtake earlier ones, whatever the jitter.
func TestLinkModel(t *testing.T) {
	f := sim.Fabric{Name: "test", Intra: sim.Link{Latency: 10 * time.Microsecond, Bandwidth: 1e9}}
	var got time.Duration
	var order []byte
	res := sim.Run(t.Context(), 2, sim.Config{Seed: 3, Fabric: f, Jitter: time.Millisecond}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
		t0 := clk.Now()
		if c.Rank() == 0 {
			for i := range 20 {
				size := 1_000_000
				if i%2 == 1 {
					size = 1 // a small message right after a big one
				}
				msg := make([]byte, size)
				msg[0] = byte(i)
				if _, err := c.Isend(msg, 1, 9); err != nil {
					return err
				}
			}
			return nil
		}
		for i := range 20 {
			b := make([]byte, 1_000_000)
			q, err := c.Irecv(b, 0, 9)
			if err != nil {
				return err
			}
			if _, err := q.Wait(ctx); err != nil {
				return err
			}
			if i == 0 {
				got = clock.Since(clk, t0)
			}
			order = append(order, b[0])
		}
		return nil
	})
	require.NoError(t, res.Err())
	// 10 us + 1 MB / 1 GB/s = 1.01 ms, plus at most 1 ms of jitter.
	require.GreaterOrEqual(t, got, 1010*time.Microsecond)
	require.Less(t, got, 2010*time.Microsecond)
	for i, b := range order {
		require.Equal(t, byte(i), b, "message %d overtook: MPI's non-overtaking rule", i)
	}
	// An allreduce of 8 bytes over 4 ranks takes the tree: 2 log2(4)
	// steps of latency + twice the payload (a ring: 6 steps + 12 bytes).
	members := []int{0, 1, 2, 3}
	want := 4*10*time.Microsecond + time.Duration(2*8/1e9*float64(time.Second))
	require.Equal(t, want, f.Collective(flight.KindAllreduce, members, 8))
	// 100 MB take the ring: 6 steps + 2(p-1)/p of the payload.
	ring := 6*10*time.Microsecond + time.Duration(float64(2*3)/4*1e8/1e9*float64(time.Second))
	require.Equal(t, ring, f.Collective(flight.KindAllreduce, members, 1e8))
	var arDone time.Duration
	res = sim.Run(t.Context(), 4, sim.Config{Fabric: f}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
		t0 := clk.Now()
		err := c.AllreduceInt64(ctx, comm.Sum, []int64{1}, []int64{0})
		if c.Rank() == 0 {
			arDone = clock.Since(clk, t0)
		}
		return err
	})
	require.NoError(t, res.Err())
	require.Equal(t, want, arDone, "the allreduce completes exactly at its modelled time")
}

// PayloadScale charges the links for N times each message's bytes, exactly:
// 10 us + 4 x 1 MB / 1 GB/s; with PayloadTagsFrom, only on the tags from
// it (the KV fragments), and a control message below it as it is; with
// PayloadHeader, a fragment's header once.
func TestPayloadScale(t *testing.T) {
	f := sim.Fabric{Name: "test", Intra: sim.Link{Latency: 10 * time.Microsecond, Bandwidth: 1e9}}
	for _, tc := range []struct {
		scale, from, head, tag int
		want                   time.Duration
	}{
		{0, 0, 0, 9, 1010 * time.Microsecond}, {1, 0, 0, 9, 1010 * time.Microsecond}, {4, 0, 0, 9, 4010 * time.Microsecond},
		{4, 16, 0, 9, 1010 * time.Microsecond}, {4, 16, 0, 16, 4010 * time.Microsecond}, {4, 16, 0, 17, 4010 * time.Microsecond},
		// A 1000-byte header is charged once: 10 us + (1000 + 4 x 999000) ns.
		{4, 16, 1000, 16, f.Intra.Time(1000 + 4*999_000)}, {1, 16, 1000, 16, 1010 * time.Microsecond},
	} {
		var got time.Duration
		res := sim.Run(t.Context(), 2, sim.Config{Seed: 1, Fabric: f, PayloadScale: tc.scale, PayloadTagsFrom: tc.from, PayloadHeader: tc.head}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
			t0 := clk.Now()
			if c.Rank() == 0 {
				_, err := c.Isend(make([]byte, 1_000_000), 1, tc.tag)
				return err
			}
			q, err := c.Irecv(make([]byte, 1_000_000), 0, tc.tag)
			if err != nil {
				return err
			}
			_, err = q.Wait(ctx)
			got = clock.Since(clk, t0)
			return err
		})
		require.NoError(t, res.Err())
		require.Equal(t, tc.want, got, "scale %d from tag %d header %d, tag %d", tc.scale, tc.from, tc.head, tc.tag)
	}
	for _, bad := range []sim.Config{{PayloadScale: -1}, {PayloadTagsFrom: -1}, {PayloadHeader: -1}} {
		res := sim.Run(t.Context(), 1, bad, func(context.Context, comm.Comm, clock.Clock) error { return nil })
		require.ErrorIs(t, res.Err(), comm.ErrBadArgument)
	}
}

// The typed collectives cost what the link model says, exactly: a float32
// allreduce of 1 MiB is a ring (2(p-1) steps, 2(p-1)/p of the buffer), an
// all-to-all of 1 MiB per rank every message at once (one latency, then
// the (p-1)/p of it that leaves the rank at the link's speed).
func TestTypedCollectivesCostTheirModel(t *testing.T) {
	f := sim.Fabric{Name: "test", Intra: sim.Link{Latency: 10 * time.Microsecond, Bandwidth: 1e9}}
	const p, bytes = 4, 1 << 20
	step := func(k int, moved float64) time.Duration {
		return time.Duration(k)*10*time.Microsecond + time.Duration(moved/1e9*float64(time.Second))
	}
	for _, tc := range []struct {
		name string
		want time.Duration
		op   func(ctx context.Context, c comm.Comm) error
	}{
		{"allreduce float32", step(2*(p-1), 2*float64(p-1)/p*bytes), func(ctx context.Context, c comm.Comm) error {
			buf := make([]float32, bytes/4)
			return comm.Allreduce(ctx, c, comm.Sum, buf, buf)
		}},
		{"alltoall float32", step(1, float64(p-1)/p*bytes), func(ctx context.Context, c comm.Comm) error {
			return comm.Alltoall(ctx, c, make([]float32, bytes/4), make([]float32, bytes/4))
		}},
	} {
		took := make([]time.Duration, p)
		res := sim.Run(t.Context(), p, sim.Config{Fabric: f}, func(ctx context.Context, c comm.Comm, clk clock.Clock) error {
			t0 := clk.Now()
			err := tc.op(ctx, c)
			took[c.Rank()] = clock.Since(clk, t0)
			return err
		})
		require.NoError(t, res.Err(), tc.name)
		for r, d := range took {
			require.Equal(t, tc.want, d, "%s: rank %d", tc.name, r)
		}
	}
}

// Across nodes a ring runs one channel per rail its members on a node can
// use: 2 nodes of 4 ranks with 4 NICs each cross at 4 x Inter, capped by
// the ring's bus bandwidth within a node; with one rail, at Inter alone.
// NVLink SHARP applies within a node only.
func TestCollectiveRailsAndAlgorithms(t *testing.T) {
	f := sim.Fabric{Name: "test", RanksPerNode: 4, Rails: 4, Ring: 300e9, NVLS: 400e9,
		Intra: sim.Link{Latency: time.Microsecond, Bandwidth: 450e9}, Inter: sim.Link{Latency: 5 * time.Microsecond, Bandwidth: 50e9}}
	const n = 1 << 30
	eight := []int{0, 1, 2, 3, 4, 5, 6, 7}
	ringAt := func(k int, lat time.Duration, p int, bw float64) time.Duration {
		return time.Duration(k)*lat + time.Duration(2*float64(p-1)/float64(p)*n/bw*float64(time.Second))
	}
	require.Equal(t, ringAt(14, 5*time.Microsecond, 8, 200e9), f.Collective(flight.KindAllreduce, eight, n), "4 rails of 50 GB/s")
	one := f
	one.Rails = 1
	require.Equal(t, ringAt(14, 5*time.Microsecond, 8, 50e9), one.Collective(flight.KindAllreduce, eight, n), "one rail")
	wide := f
	wide.Inter.Bandwidth = 100e9
	require.Equal(t, ringAt(14, 5*time.Microsecond, 8, 300e9), wide.Collective(flight.KindAllreduce, eight, n), "capped by the ring within a node")
	// Two ranks on each of two nodes use two rails.
	require.Equal(t, ringAt(6, 5*time.Microsecond, 4, 100e9), f.Collective(flight.KindAllreduce, []int{2, 3, 4, 5}, n))
	// Within a node: NVLink SHARP at its bus bandwidth, charged a ring's
	// steps; a small message takes the tree instead.
	four := []int{0, 1, 2, 3}
	require.Equal(t, ringAt(6, time.Microsecond, 4, 400e9), f.Collective(flight.KindAllreduce, four, n))
	small := 2 * 8.0
	require.Equal(t, 4*time.Microsecond+time.Duration(small/300e9*float64(time.Second)), f.Collective(flight.KindAllreduce, four, 8), "8 bytes: the tree")
	noNVLS := f
	noNVLS.NVLS = 0
	require.Equal(t, ringAt(6, time.Microsecond, 4, 300e9), noNVLS.Collective(flight.KindAllreduce, four, n), "a ring at Ring")
	// Uneven groups: the node with the fewest members sets the rails
	// (ranks 3 | 4..7: one rail).
	require.Equal(t, ringAt(8, 5*time.Microsecond, 5, 50e9), f.Collective(flight.KindAllreduce, []int{3, 4, 5, 6, 7}, n))
	// An inter link of unbounded bandwidth leaves the ring's.
	free := f
	free.Inter.Bandwidth = 0
	require.Equal(t, ringAt(14, 5*time.Microsecond, 8, 300e9), free.Collective(flight.KindAllreduce, eight, n))
	// An alltoall sends to every peer at once: a rank's 4 messages to the
	// other node through its own NIC, its 3 on its node over NVLink, at
	// once; one latency.
	sends := func(lat time.Duration, share, bw float64) time.Duration {
		return lat + time.Duration(share*n/bw*float64(time.Second))
	}
	require.Equal(t, sends(5*time.Microsecond, 4/8.0, 50e9), f.Collective(flight.KindAlltoall, eight, n))
	require.Equal(t, sends(time.Microsecond, 3/4.0, 450e9), f.Collective(flight.KindAlltoall, four, n))
	// Uneven: rank 3 alone on its node sends 4 of its 5 messages across.
	require.Equal(t, sends(5*time.Microsecond, 4/5.0, 50e9), f.Collective(flight.KindAlltoall, []int{3, 4, 5, 6, 7}, n))
	// Allgather over the rails too.
	moved := 7 / 8.0 * float64(n)
	require.Equal(t, 7*5*time.Microsecond+time.Duration(moved/200e9*float64(time.Second)), f.Collective(flight.KindAllgather, eight, n))
}

// Channels bounds the NICs a node drives between nodes, for every
// algorithm; where NVLSTree is on, an allreduce across nodes may run as
// NVLink SHARP within each node and a tree between, the two pipelined,
// the tree moving the node's buffer once each way between two nodes and
// 2(r-1)/r times over r.
func TestCollectiveChannelsAndNVLSTree(t *testing.T) {
	f := sim.Fabric{Name: "test", RanksPerNode: 4, Rails: 4, Ring: 300e9, NVLS: 400e9, Channels: 2, NVLSTree: true,
		Intra: sim.Link{Latency: time.Microsecond, Bandwidth: 450e9}, Inter: sim.Link{Latency: 5 * time.Microsecond, Bandwidth: 50e9}}
	const n = 1 << 30
	ranks := func(k int) []int {
		out := make([]int, k)
		for i := range out {
			out[i] = i
		}
		return out
	}
	at := func(lat time.Duration, moved, bw float64) time.Duration {
		return lat + time.Duration(moved/bw*float64(time.Second))
	}
	// Two nodes: within, 6 NVLS steps moving 1.5 n at 400 GB/s; between,
	// one tree round each way (2 x 5 us) moving n through 2 channels of
	// 50 GB/s, the slower phase.
	require.Equal(t, at(6*time.Microsecond+10*time.Microsecond, n, 100e9), f.Collective(flight.KindAllreduce, ranks(8), n), "2 nodes")
	// Four nodes: the tree (2 rounds each way) moves 1.5 n.
	require.Equal(t, at(6*time.Microsecond+20*time.Microsecond, 1.5*n, 100e9), f.Collective(flight.KindAllreduce, ranks(16), n), "4 nodes")
	// Without the NVLS tree, a ring over 2 channels (not 4 rails).
	flat := f
	flat.NVLSTree = false
	require.Equal(t, at(14*5*time.Microsecond, 2*7/8.0*n, 100e9), flat.Collective(flight.KindAllreduce, ranks(8), n), "a ring over 2 channels")
	// Uneven nodes (2 | 4 members): no NVLS tree; a ring over 2 channels.
	require.Equal(t, at(10*5*time.Microsecond, 2*5/6.0*n, 100e9), f.Collective(flight.KindAllreduce, []int{2, 3, 4, 5, 6, 7}, n), "uneven")
	// Faster NICs: the phase within the nodes paces (1.5 n at NVLS).
	fast := f
	fast.Channels, fast.Inter.Bandwidth = 4, 200e9
	require.Equal(t, at(6*time.Microsecond+10*time.Microsecond, 1.5*n, 400e9), fast.Collective(flight.KindAllreduce, ranks(8), n), "within paces")
	// One member a node: no NVLS tree (nothing to reduce within); a ring
	// at one NIC.
	require.Equal(t, at(6*5*time.Microsecond, 1.5*n, 50e9), f.Collective(flight.KindAllreduce, []int{0, 4, 8, 12}, n), "one a node")
	// No NVLink SHARP: no NVLS tree, whatever the flag says.
	noNVLS := f
	noNVLS.NVLS = 0
	require.Equal(t, at(14*5*time.Microsecond, 2*7/8.0*n, 100e9), noNVLS.Collective(flight.KindAllreduce, ranks(8), n), "no NVLS")
	// Within one node nothing changes: NVLink SHARP at its bus bandwidth.
	require.Equal(t, at(6*time.Microsecond, 2*3/4.0*n, 400e9), f.Collective(flight.KindAllreduce, ranks(4), n), "one node")
	// A fabric's figures: channels must not be negative.
	bad := f
	bad.Channels = -1
	res := sim.Run(t.Context(), 1, sim.Config{Fabric: bad}, func(context.Context, comm.Comm, clock.Clock) error { return nil })
	require.ErrorContains(t, res.Err(), `fabric "test": channels -1 must not be negative`)
	res = sim.Run(t.Context(), 1, sim.Config{Fabric: noNVLS}, func(context.Context, comm.Comm, clock.Clock) error { return nil })
	require.ErrorContains(t, res.Err(), `fabric "test": nvls tree needs an NVLS bus bandwidth`)
}
