package testutil

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartFPM starts p's php-fpm with flags (PHP.Args) in the foreground on
// a private configuration: pool "work", two static workers, a unix socket.
// It returns the socket and the master's pid once the socket answers and
// both workers are forked (the master listens first).
func StartFPM(t testing.TB, p PHP, flags []string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "fpm.sock")
	conf := filepath.Join(dir, "fpm.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`[global]
pid = %[1]s/fpm.pid
error_log = %[1]s/fpm.log
daemonize = no
[work]
listen = %[2]s
user = root
pm = static
pm.max_children = 2
`, dir, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	// -R lets it run as root (the tests do); -n, -d: PHP.Args.
	args := append([]string{"-F", "-R", "-y", conf}, flags...)
	cmd := StartWorkload(t, p.FPM, args...)
	deadline := time.Now().Add(Patient(10 * time.Second))
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			if len(FPMWorkers(t, cmd.Process.Pid)) == 2 {
				return sock, cmd.Process.Pid
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "fpm.log"))
			t.Fatalf("php-fpm has no two workers listening on %s; its log:\n%s", sock, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FPMWorkers returns the pids of the workers of the php-fpm master.
func FPMWorkers(t testing.TB, master int) []int {
	t.Helper()
	return ChildPIDs(t, master)
}

// ChildPIDs returns the pids of the children of pid's main thread (the
// workers of a php-fpm master or an Apache parent).
func ChildPIDs(t testing.TB, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatalf("the children of %d: %v", pid, err)
	}
	var pids []int
	for _, field := range strings.Fields(string(b)) {
		child, err := strconv.Atoi(field)
		if err != nil {
			t.Fatalf("the children of %d: %v", pid, err)
		}
		pids = append(pids, child)
	}
	return pids
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

// FastCGIGet asks the FastCGI server on the unix socket sock for script
// with query, as a GET, and returns its output (headers and body); the
// exchange has timeout to end.
func FastCGIGet(sock, script, query string, timeout time.Duration) ([]byte, error) {
	c, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
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
