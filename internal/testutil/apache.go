package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Apache's programs as Debian bookworm installs them (packages apache2 and
// libapache2-mod-php8.2, make test-tools): the server, its prefork MPM
// and PHP 8.2's module (NTS, prefork's workers are processes).
const (
	ApacheProgram = "/usr/sbin/apache2"
	apacheModules = "/usr/lib/apache2/modules"
	ApacheModPHP  = apacheModules + "/libphp8.2.so"
	// ApacheOpcache is the opcache extension of the module's PHP.
	ApacheOpcache = "/usr/lib/php/20220829/opcache.so"
	apachePrefork = apacheModules + "/mod_mpm_prefork.so"
	// apacheAuthz is mod_authz_core: without it every request fails
	// ("AH00025: configuration error: couldn't check user").
	apacheAuthz    = apacheModules + "/mod_authz_core.so"
	apacheWorkers  = 2
	apacheUser     = "www-data"
	apacheStartDue = 10 * time.Second
)

// StartApache starts Apache with mod_php in the foreground on a private
// configuration: the prefork MPM with two workers that stay (as
// www-data), Listen on 127.0.0.1 at a free port, DocumentRoot docRoot
// (.php files run by mod_php), PHP with no php.ini but ini's lines (and
// no scanned ini directory). It returns the server's address (host:port)
// and the parent's pid once the port answers and both workers are forked;
// the process group is killed at cleanup. Without the packages the test
// is skipped, or fails under RequireBPFEnv.
func StartApache(t testing.TB, docRoot string, ini []string) (string, int) {
	t.Helper()
	for _, f := range []string{ApacheProgram, ApacheModPHP, ApacheOpcache, apachePrefork, apacheAuthz} {
		if _, err := os.Stat(f); err != nil {
			SkipOrFail(t, "Apache with mod_php (make test-tools installs apache2 and libapache2-mod-php8.2): %v", err)
		}
	}
	dir := t.TempDir()
	phpDir := filepath.Join(dir, "php")
	if err := os.Mkdir(phpDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(phpDir, "php.ini"), []byte(strings.Join(ini, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := filepath.Join(dir, "apache2.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`ServerRoot %[1]s
DefaultRuntimeDir %[1]s
PidFile %[1]s/apache2.pid
ErrorLog %[1]s/error.log
LogLevel warn
ServerName localhost
Listen %[2]s
User %[3]s
Group %[3]s
LoadModule mpm_prefork_module %[4]s
LoadModule authz_core_module %[9]s
LoadModule php_module %[5]s
StartServers %[6]d
MinSpareServers 1
MaxSpareServers %[6]d
ServerLimit %[6]d
MaxRequestWorkers %[6]d
MaxConnectionsPerChild 0
PHPIniDir %[7]s
DocumentRoot %[8]s
<FilesMatch "\.php$">
	SetHandler application/x-httpd-php
</FilesMatch>
`, dir, addr, apacheUser, apachePrefork, ApacheModPHP, apacheWorkers, phpDir, docRoot, apacheAuthz)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ApacheProgram, "-f", conf, "-DFOREGROUND")
	cmd.Dir = dir
	// An empty PHP_INI_SCAN_DIR: none of /etc/php/8.2/apache2/conf.d.
	cmd.Env = append(os.Environ(), "PHP_INI_SCAN_DIR=")
	pid := StartChild(t, cmd).Cmd.Process.Pid
	deadline := time.Now().Add(Patient(apacheStartDue))
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			if len(ChildPIDs(t, pid)) == apacheWorkers {
				return addr, pid
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("Apache has no %d workers listening on %s; its error log:\n%s", apacheWorkers, addr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ApachePHPIni returns the php.ini lines of StartApache for mod_php
// without opcache, or with opcache and its JIT (jit: "tracing",
// "function", or "" for none), as PHP.Args gives the CLI's.
func ApachePHPIni(opcache bool, jit string) []string {
	ini := []string{"display_startup_errors=0"}
	if !opcache {
		return ini
	}
	ini = append(ini, "zend_extension="+ApacheOpcache, "opcache.enable=1")
	if jit == "" {
		return append(ini, "opcache.jit=off", "opcache.jit_buffer_size=0")
	}
	return append(ini, "opcache.jit="+jit, "opcache.jit_buffer_size=32M")
}
