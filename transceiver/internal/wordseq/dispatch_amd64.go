//go:build amd64 && !purego

package wordseq

import "golang.org/x/sys/cpu"

// hasAVX2 is read once; tests turn it off to run the Go loops here too.
var hasAVX2 = cpu.X86.HasAVX2

// vector reports whether the AVX2 loops take segments of n words: they
// move 8 words (two vectors) a step.
func vector(n int) bool { return hasAVX2 && n%8 == 0 }

// The vector loops (wordseq_amd64.s). n is a positive multiple of 8 and
// segs is positive; the buffers hold n*segs words.

//go:noescape
func fillAVX2(dst *uint64, n int, seeds *uint64, segs int, step uint64)

//go:noescape
func checkAVX2(src *uint64, n int, seeds *uint64, segs int, step uint64) bool

//go:noescape
func copyCheckAVX2(dst, src *uint64, n int, seeds *uint64, segs int, step uint64) bool

// The lane-grid loops (lanes_amd64.s): runs runs, stride bytes apart, of
// nvec chunks of 32 bytes; first, inc and runInc are the run's first
// chunk of lanes, a chunk's advance and a run's.

//go:noescape
func gridFillAVX2(dst *byte, stride, runs, nvec int, first, inc, runInc *[4]uint64, w int)

//go:noescape
func gridCheckAVX2(src *byte, stride, runs, nvec int, first, inc, runInc *[4]uint64, w int) int

//go:noescape
func gridCopyCheckAVX2(dst *byte, dstStride int, src *byte, srcStride, runs, nvec int, first, inc, runInc *[4]uint64, w int) int
