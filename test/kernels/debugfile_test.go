package main

import (
	"os"
	"testing"
)

// libc's debug file (libc6-dbg, which make test installs) is found by its
// build id.
func TestDebugFileOfLibc(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		t.Skip("no glibc here")
	}
	debug, err := debugFile(userland{sysroot: "/"}, libc)
	if err != nil {
		t.Fatal(err)
	}
	if debug == "" {
		t.Skip("libc6-dbg is not installed")
	}
	if _, err := os.Stat(debug); err != nil {
		t.Fatalf("debugFile returned %q: %v", debug, err)
	}
	t.Logf("libc's debug file: %s", debug)
}
