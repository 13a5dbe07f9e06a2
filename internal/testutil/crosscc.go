package testutil

import (
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
)

// crossPrefixes are the prefixes of Debian's cross compilers
// (gcc-aarch64-linux-gnu, gcc-x86-64-linux-gnu) by GOARCH.
var crossPrefixes = map[string]string{"arm64": "aarch64-linux-gnu-", "amd64": "x86_64-linux-gnu-"}

// CrossCompileC is CompileC for the architecture goarch (a GOARCH name):
// the same flags, Debian's cross compiler for it. For the machine's own
// architecture it is CompileC.
func CrossCompileC(goarch, src, out string, extraFlags ...string) error {
	if goarch == runtime.GOARCH {
		return CompileC(src, out, extraFlags...)
	}
	prefix, ok := crossPrefixes[goarch]
	if !ok {
		return fmt.Errorf("no cross compiler for %s", goarch)
	}
	own, err := SourceFlags(src)
	if err != nil {
		return err
	}
	args := append(append(append(slices.Clone(CFlags), "-o", out, src), own...), extraFlags...)
	compiler := prefix + "gcc"
	if strings.HasSuffix(src, ".cpp") {
		compiler = prefix + "g++"
	}
	if b, err := RunWithin(exec.Command(compiler, args...), BuildTimeout); err != nil {
		return fmt.Errorf("%s %v: %w\n%s", compiler, args, err, b)
	}
	return nil
}
