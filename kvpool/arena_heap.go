//go:build !unix || race

package kvpool

// Without mmap, or under the race detector: the Go heap (see Arena).
func mapAnon(int) ([]byte, bool) { return nil, false }

func unmapAnon([]byte) {}
