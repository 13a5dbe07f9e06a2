//go:build linux

#include "textflag.h"

// func setThreadPointer(tp uint64)
TEXT ·setThreadPointer(SB), NOSPLIT, $0-8
	MOVD tp+0(FP), R0
	MSR  R0, TPIDR_EL0
	RET
