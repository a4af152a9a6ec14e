package transceiver

// The fragment digest of --verify checksum. The CTX rank hashes a
// fragment's runs while the fragment travels (after posting it, or while
// packing it) and sends the digest after it in a Digest message; the GEN
// rank hashes each run as it copies it into its blocks (the run is then in
// cache) and compares once both have arrived. xxh3 (github.com/zeebo/xxh3,
// SIMD): 60 GB/s over runs in cache here, against 24 GB/s for the CRC-32C
// it replaced, which two passes on the critical path held to 0.4-0.5x of a
// copy.

import (
	"github.com/zeebo/xxh3"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// digest chains xxh3 over a fragment's runs in wire order: each run is
// hashed seeded with the digest so far, so the digest covers every byte
// of every run, in order. It starts from the fragment's identity, so that
// a digest belongs to one fragment of one request.
type digest uint64

// newDigest is the starting digest of fragment f of request id.
func newDigest(id request.ID, f topology.Fragment) digest {
	return digest(patternMix(uint64(id)*0x9E3779B97F4A7C15 ^ uint64(f.CtxRank)<<48 ^ uint64(f.LayerLo)<<32 ^
		uint64(f.HeadLo)<<16 ^ uint64(f.BlockRem)))
}

// add folds one run into the digest.
func (d *digest) add(run []byte) { *d = digest(xxh3.HashSeed(run, uint64(*d))) }

// digestTarget is the fragment of s that a Digest message h from world
// rank src is for: the one src sends, with h's ranges. It reports false
// for none (a digest that belongs to no fragment of this session) or for
// one that already has its digest.
func digestTarget(s *session, src int, h wire.Header) (int, bool) {
	for i := range s.frags {
		fs := &s.frags[i]
		f := fs.f
		if fs.peer == src && int(h.LayerLo) == f.LayerLo && int(h.LayerHi) == f.LayerHi && int(h.HeadLo) == f.HeadLo &&
			int(h.HeadHi) == f.HeadHi && int(h.BlockMod) == f.BlockMod && int(h.BlockRem) == f.BlockRem {
			return i, !fs.haveDigest
		}
	}
	return 0, false
}
