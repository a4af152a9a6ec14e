package pieces_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/internal/pieces"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A message arrives whole and in order from each sender, whatever its
// length: empty, one byte short of a piece, a piece, and pieces and a bit.
func TestMessagesOfEveryLengthArriveWhole(t *testing.T) {
	sizes := []int{0, pieces.Chunk - 1, pieces.Chunk, 2*pieces.Chunk + 7}
	msg := func(from, size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i*7 + from)
		}
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := local.Run(ctx, 3, local.Config{}, func(ctx context.Context, w comm.Comm) error {
		if w.Rank() != 0 {
			for _, n := range sizes {
				if err := pieces.Send(ctx, w, 0, msg(w.Rank(), n), 7, 8); err != nil {
					return err
				}
			}
			return nil
		}
		next := map[int]int{}
		for range 2 * len(sizes) {
			src, b, err := pieces.Recv(ctx, w, comm.AnySource, 7, 8)
			if err != nil {
				return err
			}
			want := msg(src, sizes[next[src]])
			next[src]++
			if !bytes.Equal(b, want) {
				t.Errorf("from rank %d: %d bytes, want %d (or their contents differ)", src, len(b), len(want))
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// A header that is not eight bytes is refused, naming the sender.
func TestAMalformedHeaderIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := local.Run(ctx, 2, local.Config{}, func(ctx context.Context, w comm.Comm) error {
		if w.Rank() == 1 {
			return pieces.SendWait(ctx, w, []byte{1, 2, 3}, 0, 7)
		}
		_, _, err := pieces.Recv(ctx, w, comm.AnySource, 7, 8)
		if err == nil || !strings.Contains(err.Error(), "world rank 1: a 3-byte report header") {
			return fmt.Errorf("receiving a 3-byte header: %v, want it refused naming world rank 1", err)
		}
		return nil
	})
	require.NoError(t, err)
}
