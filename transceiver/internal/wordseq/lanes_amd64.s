//go:build amd64 && !purego

#include "textflag.h"

// The lane-grid loops (lanes.go). Each run is nvec chunks of 32 bytes;
// Y0 holds the first chunk of the current run's expected lanes, Y3 the
// current chunk's; a chunk adds Y1 (every lane + 32/w lanes' steps), a
// run adds Y2 (every lane + RunStep) to Y0. The width w picks the add:
// VPADDB, VPADDW or VPADDD, which keep lanes apart as the SWAR adds do.
//
// Arguments (all three): first, inc, runInc point to 32 bytes each; runs
// and nvec are positive.

// func gridFillAVX2(dst *byte, stride, runs, nvec int, first, inc, runInc *[4]uint64, w int)
TEXT ·gridFillAVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), R8
	MOVQ runs+16(FP), CX
	MOVQ nvec+24(FP), DX
	MOVQ first+32(FP), AX
	VMOVDQU (AX), Y0
	MOVQ inc+40(FP), AX
	VMOVDQU (AX), Y1
	MOVQ runInc+48(FP), AX
	VMOVDQU (AX), Y2
	MOVQ w+56(FP), R10
	CMPQ R10, $2
	JEQ  fillw
	JLT  fillb

filld:
	MOVQ    DI, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
filldvec:
	VMOVDQU Y3, (SI)
	VPADDD  Y1, Y3, Y3
	ADDQ    $32, SI
	DECQ    BX
	JNZ     filldvec
	VPADDD  Y2, Y0, Y0
	ADDQ    R8, DI
	DECQ    CX
	JNZ     filld
	VZEROUPPER
	RET

fillw:
	MOVQ    DI, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
fillwvec:
	VMOVDQU Y3, (SI)
	VPADDW  Y1, Y3, Y3
	ADDQ    $32, SI
	DECQ    BX
	JNZ     fillwvec
	VPADDW  Y2, Y0, Y0
	ADDQ    R8, DI
	DECQ    CX
	JNZ     fillw
	VZEROUPPER
	RET

fillb:
	MOVQ    DI, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
fillbvec:
	VMOVDQU Y3, (SI)
	VPADDB  Y1, Y3, Y3
	ADDQ    $32, SI
	DECQ    BX
	JNZ     fillbvec
	VPADDB  Y2, Y0, Y0
	ADDQ    R8, DI
	DECQ    CX
	JNZ     fillb
	VZEROUPPER
	RET

// func gridCheckAVX2(src *byte, stride, runs, nvec int, first, inc, runInc *[4]uint64, w int) int
// bad is the first run that does not hold its lanes (-1: none); the loop
// stops there.
TEXT ·gridCheckAVX2(SB), NOSPLIT, $0-72
	MOVQ src+0(FP), DI
	MOVQ stride+8(FP), R8
	MOVQ runs+16(FP), CX
	MOVQ nvec+24(FP), DX
	MOVQ first+32(FP), AX
	VMOVDQU (AX), Y0
	MOVQ inc+40(FP), AX
	VMOVDQU (AX), Y1
	MOVQ runInc+48(FP), AX
	VMOVDQU (AX), Y2
	MOVQ w+56(FP), R10
	XORQ R9, R9 // runs done
	VPXOR Y5, Y5, Y5
	CMPQ R10, $2
	JEQ  checkw
	JLT  checkb

checkd:
	MOVQ    DI, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
checkdvec:
	VPXOR   (SI), Y3, Y4
	VPOR    Y4, Y5, Y5
	VPADDD  Y1, Y3, Y3
	ADDQ    $32, SI
	DECQ    BX
	JNZ     checkdvec
	VPTEST  Y5, Y5
	JNZ     checkbad
	VPADDD  Y2, Y0, Y0
	ADDQ    R8, DI
	INCQ    R9
	CMPQ    R9, CX
	JLT     checkd
	JMP     checkok

checkw:
	MOVQ    DI, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
checkwvec:
	VPXOR   (SI), Y3, Y4
	VPOR    Y4, Y5, Y5
	VPADDW  Y1, Y3, Y3
	ADDQ    $32, SI
	DECQ    BX
	JNZ     checkwvec
	VPTEST  Y5, Y5
	JNZ     checkbad
	VPADDW  Y2, Y0, Y0
	ADDQ    R8, DI
	INCQ    R9
	CMPQ    R9, CX
	JLT     checkw
	JMP     checkok

checkb:
	MOVQ    DI, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
checkbvec:
	VPXOR   (SI), Y3, Y4
	VPOR    Y4, Y5, Y5
	VPADDB  Y1, Y3, Y3
	ADDQ    $32, SI
	DECQ    BX
	JNZ     checkbvec
	VPTEST  Y5, Y5
	JNZ     checkbad
	VPADDB  Y2, Y0, Y0
	ADDQ    R8, DI
	INCQ    R9
	CMPQ    R9, CX
	JLT     checkb

checkok:
	MOVQ $-1, R9
checkbad:
	VZEROUPPER
	MOVQ R9, ret+64(FP)
	RET

// func gridCopyCheckAVX2(dst *byte, dstStride int, src *byte, srcStride, runs, nvec int, first, inc, runInc *[4]uint64, w int) int
// Copies every run whatever it holds; bad is the first run that did not
// hold its lanes (-1: none).
TEXT ·gridCopyCheckAVX2(SB), NOSPLIT, $0-88
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R11
	MOVQ src+16(FP), R12
	MOVQ srcStride+24(FP), R8
	MOVQ runs+32(FP), CX
	MOVQ nvec+40(FP), DX
	MOVQ first+48(FP), AX
	VMOVDQU (AX), Y0
	MOVQ inc+56(FP), AX
	VMOVDQU (AX), Y1
	MOVQ runInc+64(FP), AX
	VMOVDQU (AX), Y2
	MOVQ w+72(FP), R10
	XORQ R9, R9  // runs done
	MOVQ $-1, R13 // first bad run
	VPXOR Y5, Y5, Y5
	CMPQ R10, $2
	JEQ  ccw
	JLT  ccb

ccd:
	MOVQ    DI, AX
	MOVQ    R12, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
ccdvec:
	VMOVDQU (SI), Y4
	VMOVDQU Y4, (AX)
	VPXOR   Y4, Y3, Y4
	VPOR    Y4, Y5, Y5
	VPADDD  Y1, Y3, Y3
	ADDQ    $32, SI
	ADDQ    $32, AX
	DECQ    BX
	JNZ     ccdvec
	VPTEST  Y5, Y5
	JZ      ccdok
	VPXOR   Y5, Y5, Y5
	CMPQ    R13, $-1
	JNE     ccdok
	MOVQ    R9, R13
ccdok:
	VPADDD  Y2, Y0, Y0
	ADDQ    R11, DI
	ADDQ    R8, R12
	INCQ    R9
	CMPQ    R9, CX
	JLT     ccd
	JMP     ccdone

ccw:
	MOVQ    DI, AX
	MOVQ    R12, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
ccwvec:
	VMOVDQU (SI), Y4
	VMOVDQU Y4, (AX)
	VPXOR   Y4, Y3, Y4
	VPOR    Y4, Y5, Y5
	VPADDW  Y1, Y3, Y3
	ADDQ    $32, SI
	ADDQ    $32, AX
	DECQ    BX
	JNZ     ccwvec
	VPTEST  Y5, Y5
	JZ      ccwok
	VPXOR   Y5, Y5, Y5
	CMPQ    R13, $-1
	JNE     ccwok
	MOVQ    R9, R13
ccwok:
	VPADDW  Y2, Y0, Y0
	ADDQ    R11, DI
	ADDQ    R8, R12
	INCQ    R9
	CMPQ    R9, CX
	JLT     ccw
	JMP     ccdone

ccb:
	MOVQ    DI, AX
	MOVQ    R12, SI
	VMOVDQA Y0, Y3
	MOVQ    DX, BX
ccbvec:
	VMOVDQU (SI), Y4
	VMOVDQU Y4, (AX)
	VPXOR   Y4, Y3, Y4
	VPOR    Y4, Y5, Y5
	VPADDB  Y1, Y3, Y3
	ADDQ    $32, SI
	ADDQ    $32, AX
	DECQ    BX
	JNZ     ccbvec
	VPTEST  Y5, Y5
	JZ      ccbok
	VPXOR   Y5, Y5, Y5
	CMPQ    R13, $-1
	JNE     ccbok
	MOVQ    R9, R13
ccbok:
	VPADDB  Y2, Y0, Y0
	ADDQ    R11, DI
	ADDQ    R8, R12
	INCQ    R9
	CMPQ    R9, CX
	JLT     ccb

ccdone:
	VZEROUPPER
	MOVQ R13, ret+80(FP)
	RET
