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

// callerRet returns the anchored return address into the caller of the
// function that called it (see frames_fp.go).
//
//go:noinline
func callerRet() int64 {
	var buf [1]uintptr
	// 0: runtime.Callers, 1: callerRet, 2: the recorder, 3: its caller.
	if runtime.Callers(3, buf[:]) == 0 {
		return 0
	}
	return int64(buf[0]) - int64(anchor)
}

// callerRet2 is callerRet one frame further out.
//
//go:noinline
func callerRet2() int64 {
	var buf [1]uintptr
	if runtime.Callers(4, buf[:]) == 0 {
		return 0
	}
	return int64(buf[0]) - int64(anchor)
}
