//go:build !amd64 || purego

package wordseq

// hasAVX2 is false: this build has only the Go loops.
var hasAVX2 = false

func vector(int) bool { return false }

func fillAVX2(*uint64, int, *uint64, int, uint64) { panic("wordseq: no vector loops in this build") }
func checkAVX2(*uint64, int, *uint64, int, uint64) bool {
	panic("wordseq: no vector loops in this build")
}
func copyCheckAVX2(_, _ *uint64, _ int, _ *uint64, _ int, _ uint64) bool {
	panic("wordseq: no vector loops in this build")
}

func gridFillAVX2(*byte, int, int, int, *[4]uint64, *[4]uint64, *[4]uint64, int) {
	panic("wordseq: no vector loops in this build")
}
func gridCheckAVX2(*byte, int, int, int, *[4]uint64, *[4]uint64, *[4]uint64, int) int {
	panic("wordseq: no vector loops in this build")
}
func gridCopyCheckAVX2(*byte, int, *byte, int, int, int, *[4]uint64, *[4]uint64, *[4]uint64, int) int {
	panic("wordseq: no vector loops in this build")
}
