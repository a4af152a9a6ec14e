//go:build amd64 || arm64

package flight

import "unsafe"

// callerFP returns the frame pointer of the function that calls it
// (frames_amd64.s, frames_arm64.s).
func callerFP() unsafe.Pointer

// walkFrames fills pcs with return addresses by following the frame-pointer
// chain (as the runtime's execution tracer does), skipping the first skip
// frames above the caller's own: a few nanoseconds per frame where
// runtime.Callers costs hundreds. It must be called by a function that is
// not inlined. It returns how many it filled.
//
//go:noinline
//go:nosplit
func walkFrames(pcs *[pathDepth]int64, skip int) int {
	fp := callerFP() // the frame of walkFrames' caller
	n := 0
	for i := 0; fp != nil && n < pathDepth; i++ {
		ret := *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		if ret == 0 {
			break
		}
		if i >= skip {
			pcs[n] = int64(ret)
			n++
		}
		fp = *(*unsafe.Pointer)(fp)
	}
	return n
}

// callerRetN returns the return address, anchored, into the function up
// frames above the one that called it: up 1 is the caller of a guard
// recorder (which must not be inlined), up 2 that caller's caller. A few
// nanoseconds: where a guard value was recorded.
//
//go:noinline
//go:nosplit
func callerRetN(up int) int64 {
	fp := callerFP() // callerRetN's frame
	for range up {
		if fp == nil {
			return 0
		}
		fp = *(*unsafe.Pointer)(fp)
	}
	if fp == nil {
		return 0
	}
	ret := *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
	if ret == 0 {
		return 0
	}
	return int64(ret) - int64(anchor)
}
