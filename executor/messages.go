package executor

import (
	"encoding/binary"
	"fmt"

	"github.com/rankrun/rankrun/request"
)

// Tags on the executor's control communicator (a duplicate of the world,
// so they never match the transceiver's messages).
const (
	tagMsg    = 1 // route, handoff, done: one record each
	tagTick   = 2 // leader -> members: an idle wait is over
	tagReport = 3 // every rank -> world rank 0 at the end: its RankReport's length
	tagWake   = 4 // member -> leader: a transfer of mine is over, iterate
	tagChunk  = 5 // the pieces of a RankReport whose length tagReport announced
)

// msgKind says what a record message is.
type msgKind int64

const (
	msgRoute   msgKind = iota + 1 // router -> CTX leader: a request arrived
	msgHandoff                    // CTX leader -> GEN leader: prefill done
	msgDone                       // GEN leader -> router: request finished
)

// rec is a request as it travels between ranks: fixed size, no pointers.
// Times are nanoseconds since the run's start.
type rec struct {
	Kind         msgKind
	ID           request.ID
	Tokens       int64
	Output       int64
	CtxDP        int64
	GenDP        int64
	Arrival      int64 // msgDone: when the request finished
	PrefillStart int64
	PrefillEnd   int64
	IdleArrival  int64 // 1: it arrived while its CTX group was idle
}

const recWords = 10
const recBytes = recWords * 8

func (r *rec) words() [recWords]int64 {
	return [recWords]int64{int64(r.Kind), int64(r.ID), r.Tokens, r.Output, r.CtxDP, r.GenDP, r.Arrival, r.PrefillStart, r.PrefillEnd, r.IdleArrival}
}

func (r *rec) put(b []byte) []byte {
	var buf [recBytes]byte
	for i, v := range r.words() {
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(v))
	}
	return append(b, buf[:]...)
}

func getRec(b []byte) (rec, error) {
	if len(b) != recBytes {
		return rec{}, fmt.Errorf("executor: request record of %d bytes, want %d", len(b), recBytes)
	}
	v := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }
	r := rec{Kind: msgKind(v(0)), ID: request.ID(v(1)), Tokens: v(2), Output: v(3), CtxDP: v(4), GenDP: v(5),
		Arrival: v(6), PrefillStart: v(7), PrefillEnd: v(8), IdleArrival: v(9)}
	if r.Kind < msgRoute || r.Kind > msgDone || r.ID == 0 || r.Tokens <= 0 || r.Output <= 0 {
		return rec{}, fmt.Errorf("executor: malformed request record %+v", r)
	}
	return r, nil
}

// batch encodes an intake batch: flags, then records.
func encodeBatch(dst []byte, routerDone bool, recs []rec) []byte {
	var flag byte
	if routerDone {
		flag = 1
	}
	dst = append(dst[:0], flag)
	for i := range recs {
		dst = recs[i].put(dst)
	}
	return dst
}

func decodeBatch(b []byte, dst []rec) (bool, []rec, error) {
	if len(b) < 1 || (len(b)-1)%recBytes != 0 {
		return false, dst, fmt.Errorf("executor: intake batch of %d bytes is not 1 + n*%d", len(b), recBytes)
	}
	for off := 1; off < len(b); off += recBytes {
		r, err := getRec(b[off : off+recBytes])
		if err != nil {
			return false, dst, err
		}
		dst = append(dst, r)
	}
	return b[0] == 1, dst, nil
}
