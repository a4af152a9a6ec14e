package kvpool_test

import (
	"context"
	"fmt"

	"github.com/rankrun/rankrun/kvpool"
)

func ExamplePool() {
	p, _ := kvpool.NewPool(kvpool.PoolConfig{Blocks: 8, BlockBytes: 1024, Name: "rank0"})
	ids, _ := p.Allocate(context.Background(), 7, 3) // waits until 3 blocks are free
	copy(p.Block(ids[0]), "kv bytes")
	lease, _ := p.Lease(7) // a send session pins the blocks
	fmt.Println(p.Release(7))
	_ = p.EndLease(lease)
	fmt.Println(p.Release(7), p.Stats().Used, p.CheckInvariants())
	// Output:
	// kvpool: pool "rank0": release req-7: kvpool: request blocks pinned by open leases (1 open leases; end them first)
	// <nil> 0 <nil>
}
