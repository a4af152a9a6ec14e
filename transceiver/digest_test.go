package transceiver

import (
	"testing"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// A Digest message belongs to one fragment: the one its sender sends with
// its ranges. A GEN rank receiving two fragments of a request (CTX tp=2 ->
// GEN tp=1: heads [0,4) from world rank 0, [4,8) from world rank 1) gives
// each digest to its own fragment whatever the order they come in, and
// takes none that matches no fragment, or a second one for a fragment.
func TestDigestGoesToItsOwnFragment(t *testing.T) {
	f0 := topology.Fragment{CtxRank: 0, LayerHi: 4, HeadHi: 4, BlockMod: 1}
	f1 := topology.Fragment{CtxRank: 1, LayerHi: 4, HeadLo: 4, HeadHi: 8, BlockMod: 1}
	s := &session{frags: []fragState{{f: f0, peer: 0}, {f: f1, peer: 1}}}
	hdr := func(f topology.Fragment) wire.Header {
		return wire.Header{Kind: wire.KindDigest, Sender: int32(f.CtxRank), LayerLo: uint16(f.LayerLo), LayerHi: uint16(f.LayerHi),
			HeadLo: uint16(f.HeadLo), HeadHi: uint16(f.HeadHi), BlockMod: uint16(f.BlockMod), BlockRem: uint16(f.BlockRem)}
	}
	// Rank 1's digest first: it is fragment 1's, not the first awaiting one.
	if i, ok := digestTarget(s, 1, hdr(f1)); !ok || i != 1 {
		t.Fatalf("rank 1's digest went to fragment %d (ok %v), want 1", i, ok)
	}
	s.frags[1].haveDigest = true
	if _, ok := digestTarget(s, 1, hdr(f1)); ok {
		t.Fatal("a second digest for fragment 1 was taken")
	}
	if i, ok := digestTarget(s, 0, hdr(f0)); !ok || i != 0 {
		t.Fatalf("rank 0's digest went to fragment %d (ok %v), want 0", i, ok)
	}
	// A digest with another fragment's ranges, or from a rank that sends
	// none, is for no fragment here.
	if _, ok := digestTarget(s, 0, hdr(f1)); ok {
		t.Fatal("rank 0's digest with fragment 1's heads was taken")
	}
	if _, ok := digestTarget(s, 2, hdr(f0)); ok {
		t.Fatal("a digest from world rank 2, which sends nothing here, was taken")
	}
}

// The digest covers every byte of every run, in order, and starts from
// the fragment's identity: any flipped byte, two runs swapped, or the same
// bytes as another request's or sender's fragment give another digest.
func TestDigestCoversEveryByteInOrder(t *testing.T) {
	runs := [][]byte{make([]byte, 1024), make([]byte, 1024), make([]byte, 13)}
	for i, r := range runs {
		for j := range r {
			r[j] = byte(i*31 + j*7)
		}
	}
	f := topology.Fragment{CtxRank: 1, LayerHi: 4, HeadHi: 2, BlockMod: 1}
	sum := func(id uint64, f topology.Fragment, rs [][]byte) digest {
		d := newDigest(request.ID(id), f)
		for _, r := range rs {
			d.add(r)
		}
		return d
	}
	base := sum(7, f, runs)
	for i, r := range runs {
		for _, j := range []int{0, len(r) / 2, len(r) - 1} {
			r[j] ^= 1
			if sum(7, f, runs) == base {
				t.Errorf("run %d byte %d flipped: same digest", i, j)
			}
			r[j] ^= 1
		}
	}
	if sum(7, f, [][]byte{runs[1], runs[0], runs[2]}) == base {
		t.Error("runs swapped: same digest")
	}
	if sum(8, f, runs) == base {
		t.Error("another request: same digest")
	}
	g := f
	g.CtxRank = 0
	if sum(7, g, runs) == base {
		t.Error("another sender: same digest")
	}
}
