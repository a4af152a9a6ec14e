package transceiver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/topology"
)

// A GEN rank that closes while a fragment's loan has matched but was never
// read gives the bytes back (withdrawAll): the CTX rank's lending send
// completes, instead of holding its blocks' lease for ever. (Found by
// review: the release was untested.)
func TestCloseReleasesAMatchedLoan(t *testing.T) {
	m := topology.Model{Layers: 1, KVHeads: 1, HeadDim: 8, TokensPerBlock: 4, ElemBytes: 2}
	l := topology.MustParseLayout("tp=1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := local.Run(ctx, 2, local.Config{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		role := topology.Context
		if c.Rank() == 1 {
			role = topology.Generation
		}
		shard, err := l.Shard(m, 0)
		if err != nil {
			return err
		}
		pool, err := kvpool.NewPool(kvpool.PoolConfig{Blocks: 2, BlockBytes: shard.BlockBytes(), Name: role.String()})
		if err != nil {
			return err
		}
		tr, err := New(Config{Role: role, Ctx: l, Gen: l, Model: m, World: c, Pool: pool, TransferTimeout: time.Hour})
		if err != nil {
			return err
		}
		q := Request{ID: 1, Tokens: 4}
		if _, err := pool.TryAllocate(q.ID, 1); err != nil {
			return err
		}
		if role == topology.Generation {
			if err := tr.StartReceive(q); err != nil {
				return err
			}
			if err := c.Barrier(ctx); err != nil { // CTX sends after this
				return err
			}
			if err := c.Barrier(ctx); err != nil { // CTX has lent its bytes
				return err
			}
			_ = tr.Close() // never pumped: the loan matched and is unread
			return c.Barrier(ctx)
		}
		tr.Prefill(q.ID)
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := tr.StartSend(q); err != nil {
			return err
		}
		fs := &tr.sessions[q.ID].frags[0]
		for deadline := time.Now().Add(5 * time.Second); !fs.posted; tr.Pump() { // wait for the request info
			if time.Now().After(deadline) {
				return fmt.Errorf("ctx: the fragment was never sent")
			}
			if err := tr.WaitEvent(ctx, time.Now().Add(time.Millisecond)); err != nil {
				return err
			}
		}
		if fs.parts == nil {
			return fmt.Errorf("ctx: the fragment was packed, not lent (the test needs a lending backend)")
		}
		if _, done, _ := fs.req.Test(); done {
			return fmt.Errorf("ctx: the lending send completed before the GEN rank released it")
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil { // GEN has closed
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		if _, err := fs.req.Wait(wctx); err != nil {
			return fmt.Errorf("ctx: the lending send never completed after the GEN rank closed: %w", err)
		}
		return nil // the session stays in flight (no ack will come): not this test's business
	})
	if err != nil {
		t.Fatal(err)
	}
}
