//go:build !amd64 && !arm64

package comm

import "runtime"

// walkFrames falls back to runtime.Callers where the frame-pointer walk is
// not implemented (slower, same result).
//
//go:noinline
func walkFrames(pcs *[pathDepth]int64, skip int) int {
	var buf [pathDepth]uintptr
	// 0: runtime.Callers, 1: walkFrames; then skip from its caller on.
	n := runtime.Callers(2+skip, buf[:])
	for i := range n {
		pcs[i] = int64(buf[i])
	}
	return n
}
