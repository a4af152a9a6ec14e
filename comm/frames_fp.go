//go:build amd64 || arm64

package comm

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

// callerRet returns the return address into the caller of the function that
// called it (a guard recorder, not inlined), anchored: where a guard value
// was recorded. A few nanoseconds.
//
//go:noinline
//go:nosplit
func callerRet() int64 {
	fp := callerFP() // callerRet's frame
	if fp == nil {
		return 0
	}
	fp = *(*unsafe.Pointer)(fp) // the recording function's frame
	if fp == nil {
		return 0
	}
	ret := *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
	if ret == 0 {
		return 0
	}
	return int64(ret) - int64(anchor)
}

// callerRet2 is callerRet one frame further out: the return address into
// the caller of the caller of the recording function.
//
//go:noinline
//go:nosplit
func callerRet2() int64 {
	fp := callerFP()
	for range 2 {
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
