package kvpool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A pool in an arena is a pool: zeroed blocks that keep what is written,
// apart from each other; the arena frees all of its storage at once, more
// than once if asked; a nil arena is the Go heap.
func TestArenaHoldsPools(t *testing.T) {
	a := NewArena()
	for _, arena := range []*Arena{a, nil} {
		var pools []*Pool
		for i := range 3 {
			p, err := NewPool(PoolConfig{Blocks: 64, BlockBytes: 64 << 10, Arena: arena})
			require.NoError(t, err)
			for b := range 64 {
				blk := p.Block(BlockID(b))
				require.Len(t, blk, 64<<10)
				require.Zero(t, blk[0]|blk[len(blk)-1], "fresh storage is zeroed")
				blk[0], blk[len(blk)-1] = byte(i+1), byte(b)
			}
			pools = append(pools, p)
		}
		for i, p := range pools {
			for b := range 64 {
				blk := p.Block(BlockID(b))
				require.Equal(t, [2]byte{byte(i + 1), byte(b)}, [2]byte{blk[0], blk[len(blk)-1]}, "pool %d block %d", i, b)
			}
		}
	}
	if !raceEnabled {
		require.Len(t, a.mapped, 3, "off the Go heap where the platform allows")
	}
	a.Free()
	require.Empty(t, a.mapped)
	a.Free()
	(*Arena)(nil).Free()
}
