package mpi

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
)

func sampleRecords() []flight.OpRecord {
	t0 := time.Unix(1700000000, 123456789)
	return []flight.OpRecord{
		{Group: "world/s0c1", Seq: 7, Kind: flight.KindAllreduce, Site: "consensus/gather.go:42 (consensus.Gather)", Peer: -1, Start: t0, End: t0.Add(time.Microsecond),
			Guards: []flight.GuardValue{{Name: "fits", Value: -3, Site: "executor/intake.go:94 (admit)"}, {Name: "busy", Value: 1, Bool: true}}},
		{Group: "world", Kind: flight.KindRecv, Site: "?", Peer: 3, Tag: 21, Start: t0},
		{Group: "", Seq: 1 << 60, Kind: flight.KindBarrier, Peer: -1, Err: "comm: collective timeout"},
	}
}

// The reply carries every record's guard values and the rank's pending
// ones (each field: name, value, truth flag, site).
func TestCodecRoundTrip(t *testing.T) {
	pending := []flight.GuardValue{{Name: "sessions", Value: 1 << 40, Site: "a.go:1 (f)"}, {Name: "held", Bool: true}}
	for i, recs := range [][]flight.OpRecord{nil, sampleRecords()} {
		returned := i == 1
		rp, err := decodeReply(encodeReply(reply{nonce: -5, entered: 1 << 40, returned: returned, recs: recs, pending: pending}))
		got := rp.recs
		if err != nil || rp.nonce != -5 || rp.entered != 1<<40 || rp.returned != returned {
			t.Fatalf("decode: nonce %d entered %d returned %v (want %v) err %v", rp.nonce, rp.entered, rp.returned, returned, err)
		}
		if !reflect.DeepEqual(rp.pending, pending) {
			t.Fatalf("pending guards: got %+v, want %+v", rp.pending, pending)
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
	good := encodeReply(reply{nonce: 1, entered: 3, recs: sampleRecords()})
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XXXX"), good[4:]...),
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte{}, good...), 0),
		"count":     append([]byte("RRI4\x02\x03\x00"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"returned":  append([]byte("RRI4\x02\x03\x02"), good[7:]...),       // the flag is 0 or 1
		"guards":    append(append([]byte{}, good[:len(good)-1]...), 0x7f), // 127 pending guards in no bytes
		"old":       append([]byte("RRI3"), good[4:]...),
	} {
		if _, err := decodeReply(b); !errors.Is(err, errBadReply) {
			t.Errorf("%s: err %v, want errBadReply", name, err)
		}
	}
}

func FuzzDecodeReply(f *testing.F) {
	f.Add(encodeReply(reply{nonce: 1, entered: 7, recs: sampleRecords()}))
	f.Add(encodeReply(reply{}))
	f.Add([]byte("RRI4"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rp, err := decodeReply(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to bytes that decode alike.
		again, err := decodeReply(encodeReply(rp))
		if err != nil || again.nonce != rp.nonce || again.entered != rp.entered || again.returned != rp.returned || len(again.recs) != len(rp.recs) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
