//go:build !amd64 && !arm64

package flight

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

// callerRetN is the runtime.Callers fallback of frames_fp.go's.
//
//go:noinline
func callerRetN(up int) int64 {
	var buf [1]uintptr
	// 0: runtime.Callers, 1: callerRetN, 2: the recorder, 3: its caller.
	if runtime.Callers(2+up, buf[:]) == 0 {
		return 0
	}
	return int64(buf[0]) - int64(anchor)
}
