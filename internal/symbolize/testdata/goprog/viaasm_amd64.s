#include "textflag.h"

// callThroughABI0 calls wrapped from assembly, in the assembly calling
// convention (ABI0), so the call goes through the linker-made ABI wrapper
// of wrapped, as x/sys/unix.Syscall reaches syscall.Syscall.
TEXT ·callThroughABI0(SB), 0, $8-0
	CALL ·wrapped(SB)
	RET
