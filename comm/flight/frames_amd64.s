#include "textflag.h"

// func callerFP() unsafe.Pointer
// A function without a frame does not save BP: BP is still the caller's.
TEXT ·callerFP(SB),NOSPLIT|NOFRAME,$0-8
	MOVQ BP, ret+0(FP)
	RET
