package php

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestFPMLive runs Debian's php-fpm (foreground, a private pool of two
// static workers on a unix socket), asks it for phpwork.php through
// FastCGI and walks the busy worker's frames as TestWalkLive does, with
// and without opcache's tracing JIT; with the JIT, the worker (a fork of
// the master) has the master's JIT buffer, and gdb's stops in its JIT code
// unwind with JITFrame's row of php-fpm into zend_execute.
func TestFPMLive(t *testing.T) {
	lines := workloadLines(t)
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
			f, err := elf.Open(p.FPM)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			for _, mode := range []struct {
				name    string
				opcache bool
				jit     string
			}{
				{"interpreter", false, ""},
				{"jit-tracing", true, "tracing"},
			} {
				t.Run(mode.name, func(t *testing.T) {
					sock, master := startFPM(t, p, p.Args(mode.opcache, mode.jit))
					go fcgiGet(sock, testutil.Workload(t, "phpwork.php"), "seconds=20") //nolint:errcheck // ends with the test
					pid := busyWorker(t, in, master, p.FPM)
					want := 0
					if mode.jit != "" {
						want = 1
					}
					bufs := jitBuffers(t, pid, want)
					if mode.jit == "" {
						require.Empty(t, bufs)
						walkPID(t, in, pid, p.FPM, lines)
						return
					}
					require.Len(t, bufs, 1, "the worker's JIT buffer")
					walkPID(t, in, pid, p.FPM, lines)
					gdb, err := exec.LookPath("gdb")
					if err != nil || runtime.GOARCH != "amd64" {
						t.Logf("the JIT row is not checked in php-fpm (gdb for x86-64: %v)", err)
						return
					}
					row, zx := jitRowAndCaller(t, f)
					bias := testutil.LoadBias(t, pid, p.FPM)
					samples := gdbSamples(t, []string{gdb, "-p", strconv.Itoa(pid)},
						fmt.Sprintf("JLO=%x", bufs[0].Start), fmt.Sprintf("JHI=%x", bufs[0].End))
					checkJITSamples(t, row, samples, zx.Value+bias, zx.Value+zx.Size+bias, ^uint64(0))
				})
			}
		})
	}
}

// startFPM starts p's php-fpm with flags (PHP.Args) in the foreground on
// a private configuration: pool "work", two static workers, a unix socket.
// It returns the socket and the master's pid.
func startFPM(t *testing.T, p testutil.PHP, flags []string) (string, int) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "fpm.sock")
	conf := filepath.Join(dir, "fpm.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[global]
pid = %[1]s/fpm.pid
error_log = %[1]s/fpm.log
daemonize = no
[work]
listen = %[2]s
user = root
pm = static
pm.max_children = 2
`, dir, sock)), 0o644))
	// -R lets it run as root (the tests do); -n, -d: PHP.Args.
	args := append([]string{"-F", "-R", "-y", conf}, flags...)
	cmd := testutil.StartWorkload(t, p.FPM, args...)
	deadline := time.Now().Add(testutil.Patient(10 * time.Second))
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock, cmd.Process.Pid
		}
		log, _ := os.ReadFile(filepath.Join(dir, "fpm.log"))
		require.True(t, time.Now().Before(deadline), "php-fpm listens on no %s; its log:\n%s", sock, log)
		time.Sleep(50 * time.Millisecond)
	}
}

// busyWorker returns the worker of master that runs a PHP frame, waiting
// for one.
func busyWorker(t *testing.T, in *Interpreter, master int, exe string) int {
	deadline := time.Now().Add(testutil.Patient(10 * time.Second))
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", master, master))
		require.NoError(t, err)
		for _, field := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(field)
			require.NoError(t, err)
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			if err != nil {
				continue
			}
			frames, _ := in.Layout.Walk(mem, in.ExecutorGlobals+testutil.LoadBias(t, pid, exe), 64)
			mem.Close()
			if len(frames) > 0 {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no worker of php-fpm %d runs PHP", master)
	return 0
}

// FastCGI (the FastCGI specification 1.0): record types and the responder
// role.
const (
	fcgiBeginRequest = 1
	fcgiEndRequest   = 3
	fcgiParams       = 4
	fcgiStdin        = 5
	fcgiResponder    = 1
)

// fcgiGet asks the FastCGI server on the unix socket sock for script with
// query, as a GET, and returns its output (headers and body).
func fcgiGet(sock, script, query string) ([]byte, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var params []byte
	for _, kv := range [][2]string{
		{"SCRIPT_FILENAME", script}, {"SCRIPT_NAME", "/" + filepath.Base(script)}, {"REQUEST_METHOD", "GET"},
		{"QUERY_STRING", query}, {"SERVER_PROTOCOL", "HTTP/1.1"}, {"GATEWAY_INTERFACE", "CGI/1.1"},
	} {
		params = fcgiLength(fcgiLength(params, len(kv[0])), len(kv[1]))
		params = append(append(params, kv[0]...), kv[1]...)
	}
	var req []byte
	req = fcgiRecord(req, fcgiBeginRequest, []byte{0, fcgiResponder, 0, 0, 0, 0, 0, 0})
	req = fcgiRecord(req, fcgiParams, params)
	req = fcgiRecord(req, fcgiParams, nil)
	req = fcgiRecord(req, fcgiStdin, nil)
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for {
		var h [8]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return out.Bytes(), err
		}
		body := make([]byte, int(binary.BigEndian.Uint16(h[4:]))+int(h[6]))
		if _, err := io.ReadFull(c, body); err != nil {
			return out.Bytes(), err
		}
		if h[1] == fcgiEndRequest {
			return out.Bytes(), nil
		}
		out.Write(body[:binary.BigEndian.Uint16(h[4:])])
	}
}

// fcgiRecord appends a record of type typ, request 1, holding content
// (less than 64 KiB).
func fcgiRecord(b []byte, typ byte, content []byte) []byte {
	b = append(b, 1, typ, 0, 1)
	b = binary.BigEndian.AppendUint16(b, uint16(len(content)))
	return append(append(b, 0, 0), content...)
}

// fcgiLength appends a name-value pair's length: one byte below 128, else
// four with the top bit set.
func fcgiLength(b []byte, n int) []byte {
	if n < 128 {
		return append(b, byte(n))
	}
	return binary.BigEndian.AppendUint32(b, uint32(n)|1<<31)
}
