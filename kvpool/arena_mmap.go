//go:build unix && !race

package kvpool

import "syscall"

// mapAnon maps n zeroed bytes of private anonymous memory; false where
// the system refuses (the caller falls back to the heap).
func mapAnon(n int) ([]byte, bool) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, false
	}
	adviseHuge(b)
	return b, true
}

func unmapAnon(b []byte) { _ = syscall.Munmap(b) }
