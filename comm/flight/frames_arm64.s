#include "textflag.h"

// func callerFP() unsafe.Pointer
// A function without a frame does not save R29: it is still the caller's.
TEXT ·callerFP(SB),NOSPLIT|NOFRAME,$0-8
	MOVD R29, ret+0(FP)
	RET
