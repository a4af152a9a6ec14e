// Package wordseq fills and checks arithmetic sequences of 64-bit words at
// memory speed: the inner loop of the KV pattern (transceiver/pattern.go).
//
// A buffer is len(seeds) segments of n words each, one after another;
// segment i holds seeds[i], seeds[i]+step, seeds[i]+2*step, ... (mod 2^64).
// Each function takes a whole run of segments in one call, so that the
// per-call cost is paid once per run, not once per segment.
//
// On amd64 with AVX2 the loops are vectorised (wordseq_amd64.s) when n is a
// multiple of 8; elsewhere, and under the purego build tag, they are the
// plain Go loops of generic.go. Under the race detector the vector loops
// report their reads and writes to it, as the Go loops would be seen.
package wordseq

import "fmt"

// Fill writes the segments of seeds into dst.
func Fill(dst []uint64, n int, seeds []uint64, step uint64) {
	need(len(dst), n, len(seeds), "Fill dst")
	if len(seeds) == 0 || n == 0 {
		return
	}
	dst = dst[:n*len(seeds)]
	if vector(n) {
		raceWrite(dst)
		fillAVX2(&dst[0], n, &seeds[0], len(seeds), step)
		return
	}
	fillGeneric(dst, n, seeds, step)
}

// Check reports whether src holds the segments of seeds.
func Check(src []uint64, n int, seeds []uint64, step uint64) bool {
	need(len(src), n, len(seeds), "Check src")
	if len(seeds) == 0 || n == 0 {
		return true
	}
	src = src[:n*len(seeds)]
	if vector(n) {
		raceRead(src)
		return checkAVX2(&src[0], n, &seeds[0], len(seeds), step)
	}
	return checkGeneric(src, n, seeds, step)
}

// CopyCheck copies the segments' worth of words from src into dst, all of
// them whatever they hold, and reports whether they are the segments of
// seeds: one pass for what would be a copy and a Check.
func CopyCheck(dst, src []uint64, n int, seeds []uint64, step uint64) bool {
	need(len(src), n, len(seeds), "CopyCheck src")
	need(len(dst), n, len(seeds), "CopyCheck dst")
	if len(seeds) == 0 || n == 0 {
		return true
	}
	src, dst = src[:n*len(seeds)], dst[:n*len(seeds)]
	if vector(n) {
		raceRead(src)
		raceWrite(dst)
		return copyCheckAVX2(&dst[0], &src[0], n, &seeds[0], len(seeds), step)
	}
	return copyCheckGeneric(dst, src, n, seeds, step)
}

// need panics unless a buffer of have words holds segs segments of n.
func need(have, n, segs int, what string) {
	if n < 0 || have < n*segs {
		panic(fmt.Sprintf("wordseq: %s has %d words, %d segments of %d need %d", what, have, segs, n, n*segs))
	}
}
