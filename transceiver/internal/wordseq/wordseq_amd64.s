//go:build amd64 && !purego

#include "textflag.h"

// Each loop keeps the expected words of the next 8 in Y0 (words 0-3) and
// Y1 (words 4-7), and ORs what it reads XOR what it expects into Y5 and
// Y6: a segment matches when both stay zero. No branch depends on the
// data, so a mismatch costs nothing until the end.

// OFFSETS sets Y10 = [0, s, 2s, 3s], Y11 = Y10 + 4s in every lane and
// Y12 = 8s in every lane, for step s in BX. Clobbers R8-R11, X13.
#define OFFSETS \
	XORQ R8, R8; \
	MOVQ BX, R9; \
	LEAQ (BX)(BX*1), R10; \
	LEAQ (R10)(BX*1), R11; \
	VMOVQ R8, X10; \
	VPINSRQ $1, R9, X10, X10; \
	VMOVQ R10, X13; \
	VPINSRQ $1, R11, X13, X13; \
	VINSERTI128 $1, X13, Y10, Y10; \
	MOVQ BX, R8; \
	SHLQ $2, R8; \
	VMOVQ R8, X13; \
	VPBROADCASTQ X13, Y13; \
	VPADDQ Y13, Y10, Y11; \
	VPADDQ Y13, Y13, Y12

// SEED starts a segment: Y0, Y1 = the first 8 words expected from the
// seed at (DX).
#define SEED \
	VPBROADCASTQ (DX), Y0; \
	VPADDQ Y11, Y0, Y1; \
	VPADDQ Y10, Y0, Y0

// func fillAVX2(dst *uint64, n int, seeds *uint64, segs int, step uint64)
TEXT ·fillAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ seeds+16(FP), DX
	MOVQ segs+24(FP), R13
	MOVQ step+32(FP), BX
	OFFSETS

fillseg:
	SEED
	MOVQ CX, R12

fillloop:
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VPADDQ  Y12, Y0, Y0
	VPADDQ  Y12, Y1, Y1
	ADDQ    $64, DI
	SUBQ    $8, R12
	JNZ     fillloop
	ADDQ    $8, DX
	DECQ    R13
	JNZ     fillseg
	VZEROUPPER
	RET

// func checkAVX2(src *uint64, n int, seeds *uint64, segs int, step uint64) bool
TEXT ·checkAVX2(SB), NOSPLIT, $0-41
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ seeds+16(FP), DX
	MOVQ segs+24(FP), R13
	MOVQ step+32(FP), BX
	OFFSETS
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6

checkseg:
	SEED
	MOVQ CX, R12

checkloop:
	VPXOR  (SI), Y0, Y7
	VPXOR  32(SI), Y1, Y8
	VPOR   Y7, Y5, Y5
	VPOR   Y8, Y6, Y6
	VPADDQ Y12, Y0, Y0
	VPADDQ Y12, Y1, Y1
	ADDQ   $64, SI
	SUBQ   $8, R12
	JNZ    checkloop
	ADDQ   $8, DX
	DECQ   R13
	JNZ    checkseg
	VPOR   Y6, Y5, Y5
	VPTEST Y5, Y5
	SETEQ  ret+40(FP)
	VZEROUPPER
	RET

// func copyCheckAVX2(dst, src *uint64, n int, seeds *uint64, segs int, step uint64) bool
TEXT ·copyCheckAVX2(SB), NOSPLIT, $0-49
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ seeds+24(FP), DX
	MOVQ segs+32(FP), R13
	MOVQ step+40(FP), BX
	OFFSETS
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6

copyseg:
	SEED
	MOVQ CX, R12

copyloop:
	VMOVDQU (SI), Y7
	VMOVDQU 32(SI), Y8
	VMOVDQU Y7, (DI)
	VMOVDQU Y8, 32(DI)
	VPXOR   Y0, Y7, Y7
	VPXOR   Y1, Y8, Y8
	VPOR    Y7, Y5, Y5
	VPOR    Y8, Y6, Y6
	VPADDQ  Y12, Y0, Y0
	VPADDQ  Y12, Y1, Y1
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $8, R12
	JNZ     copyloop
	ADDQ    $8, DX
	DECQ    R13
	JNZ     copyseg
	VPOR    Y6, Y5, Y5
	VPTEST  Y5, Y5
	SETEQ   ret+48(FP)
	VZEROUPPER
	RET
