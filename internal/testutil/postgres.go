package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgreSQL 15 as Debian bookworm installs it (packages postgresql-15 and
// postgresql-client-15, make test-tools): its server, built with its USDT
// probes (72 notes, semaphores), and the programs the tests drive it with.
const (
	postgresBinDir = "/usr/lib/postgresql/15/bin"
	// PostgresProgram is the server's executable, the file its probes are in.
	PostgresProgram = postgresBinDir + "/postgres"
	postgresInitdb  = postgresBinDir + "/initdb"
	postgresIsReady = postgresBinDir + "/pg_isready"
	postgresPsql    = postgresBinDir + "/psql"
	// PostgresPgbench is the client's benchmark (the bench's usdt suite).
	PostgresPgbench = postgresBinDir + "/pgbench"
	// PostgresUser is the package's system user, the server's: it refuses
	// root. The clusters trust it over their socket.
	PostgresUser = postgresUser
	// postgresUser is the package's system user: the server refuses root.
	postgresUser     = "postgres"
	postgresStartDue = 15 * time.Second
	postgresStopDue  = 10 * time.Second
	// postgresLogFile is the server's log, in its data directory's log.
	postgresLogFile = "postgresql.log"
)

// Postgres is a private PostgreSQL cluster of a test, and its server once
// started.
type Postgres struct {
	// PID is the postmaster's, once started; each connection gets a
	// backend it forks.
	PID int
	// SocketDir holds the server's only socket (unix, no TCP).
	SocketDir string
	dir, data string
	cred      *syscall.Credential
	child     *Child
}

// NewPostgres initdbs a cluster in a temporary directory, as the postgres
// system user, with trust authentication. initdb runs the server itself
// (single-user mode, its bootstrap SQL: queries that fire the query
// probes), so a test counting probe records runs it before it attaches.
// Without the packages the test is skipped, or fails under RequireBPFEnv.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	RequirePostgres(t)
	cred := postgresCredential(t)
	dir := t.TempDir()
	// The server's user walks to its directories: testing's per-test
	// directory above dir is root's, mode 0700.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	p, err := initPostgres(dir, cred)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// InitPostgres is NewPostgres outside a test (the bench): the cluster in
// dir, an empty directory every directory above which the postgres user
// may walk through (mode 0711 or more).
func InitPostgres(dir string) (*Postgres, error) {
	for _, f := range []string{PostgresProgram, postgresInitdb, postgresIsReady, postgresPsql} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("PostgreSQL 15 (make test-tools installs postgresql-15 and postgresql-client-15): %w", err)
		}
	}
	cred, err := lookupPostgresCredential()
	if err != nil {
		return nil, err
	}
	return initPostgres(dir, cred)
}

func initPostgres(dir string, cred *syscall.Credential) (*Postgres, error) {
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := exec.Command(postgresInitdb, "-D", data, "-U", postgresUser, "--auth=trust",
		"--locale=C", "--encoding=UTF8", "--no-sync")
	asPostgres(initdb, dir, cred)
	if out, err := RunWithin(initdb, Patient(time.Minute)); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return &Postgres{SocketDir: sock, dir: dir, data: data, cred: cred}, nil
}

// Start starts the cluster's server as the postgres system user, listening
// only on a unix socket in a directory of its own, with fsync off and its
// log in one file (Log), the settings ("name=value") added, and returns
// once it accepts connections. At cleanup the server is asked to stop
// (SIGINT: fast shutdown) and its process group killed if it has not
// within 10 s.
func (p *Postgres) Start(t testing.TB, settings ...string) {
	t.Helper()
	err := p.StartServer(settings...)
	if p.child != nil {
		t.Cleanup(func() {
			if err := p.StopServer(); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("%s", p.child.lastOutput())
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// StartServer is Start outside a test (the bench): the caller stops the
// server with StopServer, also after an error.
func (p *Postgres) StartServer(settings ...string) error {
	sock := p.SocketDir
	args := []string{"-D", p.data, "-k", sock, "-h", "",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "logging_collector=on", "-c", "log_directory=log", "-c", "log_filename=" + postgresLogFile}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(PostgresProgram, args...)
	asPostgres(cmd, p.dir, p.cred)
	child, err := startChild(cmd)
	if err != nil {
		return err
	}
	p.child = child
	p.PID = cmd.Process.Pid
	deadline := time.Now().Add(Patient(postgresStartDue))
	for {
		ready := exec.Command(postgresIsReady, "-h", sock, "-U", postgresUser, "-d", "postgres", "-t", "1")
		if _, err := RunWithin(ready, 5*time.Second); err == nil {
			return nil
		}
		select {
		case <-p.child.Exited():
			log, _ := os.ReadFile(filepath.Join(p.data, "log", postgresLogFile))
			return fmt.Errorf("postgres exited before it accepted connections\n%s\nits log:\n%s", p.child.lastOutput(), log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.data, "log", postgresLogFile))
			return fmt.Errorf("postgres did not accept connections within %v\n%s\nits log:\n%s", Patient(postgresStartDue), p.child.lastOutput(), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns what the server has logged so far: lines of the default
// log_line_prefix, "time [pid] ".
func (p *Postgres) Log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.data, "log", postgresLogFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// RequirePostgres skips the test without Debian's PostgreSQL 15 server
// and psql, or fails it under RequireBPFEnv.
func RequirePostgres(t testing.TB) {
	t.Helper()
	for _, f := range []string{PostgresProgram, postgresInitdb, postgresIsReady, postgresPsql} {
		if _, err := os.Stat(f); err != nil {
			SkipOrFail(t, "PostgreSQL 15 (make test-tools installs postgresql-15 and postgresql-client-15): %v", err)
		}
	}
}

// StopServer asks the server for a fast shutdown (SIGINT: it ends the
// backends and exits), waits for it up to 10 s, then kills what is left of
// its process group.
func (p *Postgres) StopServer() error {
	if p.child == nil {
		return nil
	}
	_ = p.child.Cmd.Process.Signal(syscall.SIGINT)
	var late error
	select {
	case <-p.child.Exited():
	case <-time.After(Patient(postgresStopDue)):
		late = fmt.Errorf("postgres (pid %d) did not stop within %v of SIGINT: killed", p.PID, Patient(postgresStopDue))
	}
	if err := p.child.Kill(Patient(30 * time.Second)); err != nil {
		return err
	}
	return late
}

// Psql runs script through psql, one statement after another as the lines
// of a file (each statement its own query), over the server's socket as
// the postgres user, and returns what psql printed: unaligned rows, no
// headers. psql reads no ~/.psqlrc and stops at the first error, which
// fails the test, as does a run past timeout.
func (p *Postgres) Psql(t testing.TB, timeout time.Duration, script string) string {
	t.Helper()
	cmd := exec.Command(postgresPsql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", p.SocketDir, "-U", postgresUser, "-d", "postgres", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := OutputWithin(cmd, timeout)
	if err != nil {
		t.Fatalf("psql: %v", err)
	}
	return string(out)
}

// postgresCredential is the postgres system user's, with no supplementary
// groups.
func postgresCredential(t testing.TB) *syscall.Credential {
	t.Helper()
	cred, err := lookupPostgresCredential()
	if err != nil {
		SkipOrFail(t, "%v", err)
	}
	return cred
}

func lookupPostgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup(postgresUser)
	if err != nil {
		return nil, fmt.Errorf("user %s (the postgresql-15 package creates it): %w", postgresUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// asPostgres has cmd run as cred's user in dir, with that user's HOME.
func asPostgres(cmd *exec.Cmd, dir string, cred *syscall.Credential) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = cred
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, fmt.Sprintf("USER=%s", postgresUser))
}
