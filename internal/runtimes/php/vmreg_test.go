package php

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestVMOplineRegister checks in Debian's php (amd64, arm64) that
// execute_ex keeps the opline where bpf/php.h takes it (PHP_UREGS_OPLINE):
// it loads EX(opline) into the register once it is entered and dispatches
// through it (jmp *(%r15); ldr x0, [x28] then br x0) at every handler.
func TestVMOplineRegister(t *testing.T) {
	for _, tc := range []struct {
		arch           string
		load, dispatch []byte
	}{
		// mov (%rdi),%r15; jmp *(%r15)
		{"amd64", []byte{0x4c, 0x8b, 0x3f}, []byte{0x41, 0xff, 0x27}},
		// ldr x28, [x0]; ldr x0, [x28]
		{"arm64", binary.LittleEndian.AppendUint32(nil, 0xf940001c), binary.LittleEndian.AppendUint32(nil, 0xf9400380)},
	} {
		for _, v := range testutil.PHPVersions {
			t.Run(tc.arch+"/"+v, func(t *testing.T) {
				p, err := testutil.DebianPHPOf(tc.arch, v)
				if err != nil {
					testutil.SkipOrFail(t, "Debian's PHP %s (%s): %v", v, tc.arch, err)
				}
				f, err := elf.Open(p.Path)
				require.NoError(t, err)
				defer f.Close()
				in, err := Detect(f)
				require.NoError(t, err)
				code := make([]byte, in.ExecuteExEnd-in.ExecuteExStart)
				text := f.Section(".text")
				_, err = text.ReadAt(code, int64(in.ExecuteExStart-text.Addr))
				require.NoError(t, err)
				load := bytes.Index(code, tc.load)
				require.True(t, load >= 0 && load < 128, "execute_ex loads EX(opline) into the register first (at %d)", load)
				n := 0
				for i := 0; i < len(code); i += len(tc.dispatch) {
					// arm64: aligned instructions only.
					j := bytes.Index(code[i:], tc.dispatch)
					if j < 0 {
						break
					}
					if tc.arch == "amd64" || (i+j)%4 == 0 {
						n++
					}
					i += j
				}
				t.Logf("execute_ex: %d bytes, the opline loaded at +%d, %d dispatches through it", len(code), load, n)
				require.Greater(t, n, 100, "dispatches through the opline register")
			})
		}
	}
}
