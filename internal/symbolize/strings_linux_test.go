package symbolize

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// writable is in the test binary's data: written at run time, so never
// read from the file.
var writable = [8]byte{'w', 'r', 'i', 't', 'a', 'b', 'l', 'e'}

// The test binary's own strings: a literal is read from its executable's
// read-only segment (and code, which is never written); a string in
// writable memory (the heap, data) is not.
func TestReadExecutableString(t *testing.T) {
	const literal = "bpfprofiler: a literal ReadExecutableString finds"
	heap := strings.Clone(literal)
	at := func(s string) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.StringData(s)))) }
	code := uint64(reflect.ValueOf(TestReadExecutableString).Pointer())
	s := New(Options{})
	defer s.Close()
	pid := uint32(os.Getpid()) //nolint:gosec // a pid
	tests := []struct {
		name   string
		pid    uint32
		addr   uint64
		n      int
		exited bool
		want   string // "": none
	}{
		{name: "a literal", pid: pid, addr: at(literal), n: len(literal), want: literal},
		{name: "a literal's middle", pid: pid, addr: at(literal) + 13, n: 6, want: "a lite"},
		{name: "the heap", pid: pid, addr: at(heap), n: len(heap)},
		{name: "code", pid: pid, addr: code, n: 8, want: memAt(t, code, 8)},
		{name: "data", pid: pid, addr: uint64(uintptr(unsafe.Pointer(&writable))), n: 8},
		{name: "no bytes", pid: pid, addr: at(literal), n: 0},
		{name: "longer than a label's string", pid: pid, addr: at(literal), n: 256},
		{name: "wrapping", pid: pid, addr: ^uint64(0) - 2, n: 8},
		{name: "a process never read, exited", pid: 1<<22 + 1, addr: at(literal), n: 4, exited: true},
		{name: "this process, taken as exited once read", pid: pid, addr: at(literal), n: 6, exited: true, want: literal[:6]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := s.ReadExecutableString(tt.pid, tt.addr, tt.n, tt.exited)
			if string(got) != tt.want || ok != (tt.want != "") {
				t.Errorf("ReadExecutableString(%#x, %d) = %q, %v; want %q", tt.addr, tt.n, got, ok, tt.want)
			}
		})
	}
}

// memAt returns n bytes of this process's memory at addr.
func memAt(t *testing.T, addr uint64, n int) string {
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	b := make([]byte, n)
	if _, err := mem.ReadAt(b, int64(addr)); err != nil { //nolint:gosec // a user address
		t.Fatal(err)
	}
	return string(b)
}
