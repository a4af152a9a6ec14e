// Package pieces moves a message of any length between two ranks of a
// comm.Comm: its length first, then the message in pieces of at most
// Chunk bytes, in order (messages of one pair and tag never overtake each
// other), so no receive buffer has to guess the size. The executor's rank
// reports travel this way at the end of a run, and an mpirun job's
// partial reports after a failure.
//
// It knows nothing of what the bytes say; the caller picks the two tags
// and bounds every wait with its context.
package pieces

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/rankrun/rankrun/comm"
)

// Chunk bounds one piece.
const Chunk = 1 << 20

// maxLen bounds the length a receiver accepts from a header.
const maxLen = 1 << 40

// Send sends b to rank to: its length under tagLen, then its pieces under
// tagPiece.
func Send(ctx context.Context, c comm.Comm, to int, b []byte, tagLen, tagPiece int) error {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	if err := SendWait(ctx, c, n[:], to, tagLen); err != nil {
		return err
	}
	for off := 0; off < len(b); off += Chunk {
		if err := SendWait(ctx, c, b[off:min(off+Chunk, len(b))], to, tagPiece); err != nil {
			return err
		}
	}
	return nil
}

// Recv receives one message Send sent from src (comm.AnySource: whichever
// rank's length comes first; the pieces then come from that rank). It
// returns the sender and the message.
func Recv(ctx context.Context, c comm.Comm, src, tagLen, tagPiece int) (int, []byte, error) {
	var n [8]byte
	st, err := RecvWait(ctx, c, n[:], src, tagLen)
	if err != nil {
		return -1, nil, err
	}
	if st.Len != len(n) {
		return st.Source, nil, fmt.Errorf("world rank %d: a %d-byte report header", st.Source, st.Len)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > maxLen {
		return st.Source, nil, fmt.Errorf("world rank %d: a report of %d bytes", st.Source, size)
	}
	b := make([]byte, size)
	for off := 0; off < len(b); {
		piece, err := RecvWait(ctx, c, b[off:min(off+Chunk, len(b))], st.Source, tagPiece)
		if err != nil {
			return st.Source, nil, err
		}
		if piece.Len == 0 {
			return st.Source, nil, fmt.Errorf("world rank %d: an empty report piece", st.Source)
		}
		off += piece.Len
	}
	return st.Source, b, nil
}

// SendWait sends b to rank to under tag and waits until it is taken.
func SendWait(ctx context.Context, c comm.Comm, b []byte, to, tag int) error {
	q, err := c.Isend(b, to, tag)
	if err != nil {
		return err
	}
	_, err = q.Wait(ctx)
	return err
}

// RecvWait receives into b from src under tag; a receive ctx ends is
// cancelled.
func RecvWait(ctx context.Context, c comm.Comm, b []byte, src, tag int) (comm.Status, error) {
	q, err := c.Irecv(b, src, tag)
	if err != nil {
		return comm.Status{}, err
	}
	st, err := q.Wait(ctx)
	if err != nil {
		_ = q.Cancel()
	}
	return st, err
}
