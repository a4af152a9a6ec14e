//go:build linux && !race

package kvpool

import "syscall"

// adviseHuge asks Linux to back a pool's storage with huge pages where it
// can (transparent huge pages in "madvise" mode, the common setting): a
// pool is written block by block as requests arrive, and each first touch
// of a 4 KiB page is a fault. Advice only: nothing changes where the
// kernel declines, and the pool's contents are the same either way.
func adviseHuge(b []byte) {
	if len(b) >= 2<<20 {
		_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE
	}
}
