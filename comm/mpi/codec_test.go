package mpi

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
)

func sampleRecords() []comm.OpRecord {
	t0 := time.Unix(1700000000, 123456789)
	return []comm.OpRecord{
		{Group: "world/s0c1", Seq: 7, Kind: comm.KindAllreduce, Site: "consensus/gather.go:42 (consensus.Gather)", Peer: -1, Start: t0, End: t0.Add(time.Microsecond)},
		{Group: "world", Kind: comm.KindRecv, Site: "?", Peer: 3, Tag: 21, Start: t0},
		{Group: "", Seq: 1 << 60, Kind: comm.KindBarrier, Peer: -1, Err: "comm: collective timeout"},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, recs := range [][]comm.OpRecord{nil, sampleRecords()} {
		nonce, got, err := decodeReply(encodeReply(-5, recs))
		if err != nil || nonce != -5 {
			t.Fatalf("decode: nonce %d err %v", nonce, err)
		}
		if len(recs) == 0 && len(got) == 0 {
			continue
		}
		for i := range recs {
			if !recs[i].Start.Equal(got[i].Start) || !recs[i].End.Equal(got[i].End) {
				t.Fatalf("record %d times: %v/%v, want %v/%v", i, got[i].Start, got[i].End, recs[i].Start, recs[i].End)
			}
			got[i].Start, got[i].End = recs[i].Start, recs[i].End
		}
		if !reflect.DeepEqual(got, recs) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, recs)
		}
	}
}

func TestCodecRejects(t *testing.T) {
	good := encodeReply(1, sampleRecords())
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XXXX"), good[4:]...),
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte{}, good...), 0),
		"count":     append([]byte("RRI1\x02"), 0xff, 0xff, 0xff, 0xff, 0x0f),
	} {
		if _, _, err := decodeReply(b); !errors.Is(err, errBadReply) {
			t.Errorf("%s: err %v, want errBadReply", name, err)
		}
	}
}

func FuzzDecodeReply(f *testing.F) {
	f.Add(encodeReply(1, sampleRecords()))
	f.Add(encodeReply(0, nil))
	f.Add([]byte("RRI1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		nonce, recs, err := decodeReply(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to bytes that decode alike.
		again := encodeReply(nonce, recs)
		n2, r2, err := decodeReply(again)
		if err != nil || n2 != nonce || len(r2) != len(recs) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
