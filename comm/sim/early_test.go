package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
)

// Early arrivals: a message in flight may have arrived by any Test before
// its receiver's blocking wait, a seeded choice of the schedule. Over many
// schedules a receiver's first Test, made at the instant the messages were
// sent, sees one arrived in some and not in others; messages of one pair still
// arrive in the order they were sent, from the first rank, a middle and
// the last (a receive from any source too); and without early arrivals no
// such Test ever sees a message (the link model's jitter is still ahead).
func TestEarlyArrivalsKeepOrderAndLetRanksSeeDifferently(t *testing.T) {
	const n, msgs = 4, 6
	run := func(seed uint64, early bool, any bool) (seen int) {
		cfg := sim.Config{Seed: seed, Checked: true, Jitter: 20 * time.Microsecond, EarlyArrivals: early}
		res := sim.Run(context.Background(), n, cfg, func(ctx context.Context, c comm.Comm, _ clock.Clock) error {
			if c.Rank() != 1 {
				var qs []comm.Request
				for i := range msgs {
					q, err := c.Isend([]byte{byte(c.Rank()), byte(i)}, 1, 5)
					if err != nil {
						return err
					}
					qs = append(qs, q)
				}
				for _, q := range qs {
					if _, err := q.Wait(ctx); err != nil {
						return err
					}
				}
				return nil
			}
			next := map[byte]byte{}
			for k := range (n - 1) * msgs {
				buf := make([]byte, 2)
				src := comm.AnySource
				if !any {
					src = []int{0, 2, 3}[k/msgs] // each sender's messages in turn
				}
				q, err := c.Irecv(buf, src, 5)
				if err != nil {
					return err
				}
				if _, done, err := q.Test(); err != nil {
					return err
				} else if done && k == 0 {
					seen++ // the first look, at the instant of the sends
				}
				if _, err := q.Wait(ctx); err != nil {
					return err
				}
				if buf[1] != next[buf[0]] {
					t.Errorf("seed %d: message %d from rank %d arrived before message %d", seed, buf[1], buf[0], next[buf[0]])
				}
				next[buf[0]]++
			}
			return nil
		})
		require.NoError(t, res.Err(), "seed %d", seed)
		return seen
	}
	for _, any := range []bool{false, true} {
		some, none := 0, 0
		for seed := uint64(1); seed <= 40; seed++ {
			require.Zero(t, run(seed, false, any), "seed %d: a Test saw a message before the link model's arrival without early arrivals", seed)
			if run(seed, true, any) > 0 {
				some++
			} else {
				none++
			}
		}
		require.Positive(t, some, "no schedule let a Test see a message in flight (any source %v)", any)
		require.Positive(t, none, "every schedule let a Test see one (any source %v)", any)
	}
}
