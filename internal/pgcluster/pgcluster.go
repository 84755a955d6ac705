// Package pgcluster runs a throwaway PostgreSQL cluster from the server
// binaries installed on the machine (initdb, pg_ctl, postgres).
//
// It is meant for demos and tests: the cluster lives in a fresh temporary
// directory, listens only on 127.0.0.1 (plus a unix socket inside that
// directory), trusts every local connection and runs with fsync and full
// page writes turned off. Nothing about it is durable against an
// operating-system crash, but a crash of the server itself (Kill, Restart
// with "immediate") loses no acknowledged commit, which is what a
// fault-injection suite needs; for that reason synchronous_commit stays on
// unless Options.AsyncCommit is set.
//
// PostgreSQL refuses to run as root. When the calling process is root, the
// helper runs initdb and pg_ctl as an unprivileged user (the "postgres"
// user if it exists, else "nobody") by setting the child processes'
// credentials directly; it does not need sudo or runuser.
//
// A Cluster's methods are safe for concurrent use. The helper prints
// nothing unless Options.Logf is set, and it leaves no goroutine running
// between calls.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Options configures Start. The zero value (or a nil *Options) is valid.
type Options struct {
	// BinDir is the directory holding initdb, pg_ctl and postgres.
	// Default: the directory found by FindBinDir.
	BinDir string
	// Port is the TCP port the server listens on at 127.0.0.1.
	// Default: a free port picked by the helper (if the port is taken
	// between picking and binding, Start retries with another one).
	Port int
	// Logf, if set, receives one line per lifecycle step (initdb, start,
	// stop, ...). Default: silent.
	Logf func(format string, args ...any)
	// AsyncCommit sets synchronous_commit=off. Default false: commits are
	// written (not fsynced: fsync is always off) to the WAL before they
	// are acknowledged, so Kill and Restart(ctx, "immediate") never lose
	// an acknowledged commit. With AsyncCommit, commits acknowledged in
	// the last few hundred milliseconds before a Kill or immediate
	// restart are lost; use it only where no crash is simulated.
	AsyncCommit bool
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster created by
// Start. Its exported fields must not be modified.
type Cluster struct {
	// DataDir is the cluster's data directory (inside a temporary
	// directory that Stop removes).
	DataDir string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// DSN is a libpq URL:
	// postgres://USER@127.0.0.1:PORT/postgres?sslmode=disable
	DSN string
	// User is the database superuser name, which is also the OS user
	// the server runs as.
	User string
	// BinDir is the directory of the PostgreSQL binaries used.
	BinDir string
	// SocketDir is the directory holding the server's unix socket.
	SocketDir string
	// LogFile is the server log (kept up to date while the server runs,
	// removed by Stop).
	LogFile string

	baseDir string
	cred    *syscall.Credential // nil unless we run as root
	logf    func(format string, args ...any)
	async   bool

	mu      sync.Mutex
	removed bool
}

// Timeouts. pg_ctl gets its own -t so that it never waits forever even
// with a context without deadline.
const (
	pgCtlTimeoutSec = 60
	killWait        = 10 * time.Second
	stopWaitDelay   = 5 * time.Second
	logTailLines    = 30
	maxPortAttempts = 3
)

// Start creates a fresh cluster in a new temporary directory (initdb with
// trust authentication, UTF8 encoding, C locale and --no-sync), starts it
// with pg_ctl -w on 127.0.0.1:Port and returns once it accepts
// connections. On failure everything it created is removed, and the error
// includes the tail of the server log when the server was started.
func Start(ctx context.Context, opts *Options) (*Cluster, error) {
	if opts == nil {
		opts = &Options{}
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if err := checkBinDir(binDir); err != nil {
		return nil, fmt.Errorf("pgcluster: Options.BinDir: %w", err)
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("pgcluster: invalid Options.Port %d", opts.Port)
	}

	userName, cred, err := serverUser()
	if err != nil {
		return nil, err
	}

	c, err := newCluster("pgcluster-", userName, binDir, cred, logf, opts.AsyncCommit)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.mu.Lock()
			_ = c.destroyLocked(context.WithoutCancel(ctx))
			c.mu.Unlock()
		}
	}()

	logf("pgcluster: initdb %s (user %s, binaries %s)", c.DataDir, userName, binDir)
	out, err := c.run(ctx, "initdb",
		"-D", c.DataDir,
		"-U", userName,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync",
	)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, tail(out, logTailLines))
	}
	if err := c.appendInclude(); err != nil {
		return nil, err
	}

	port := opts.Port
	for attempt := 1; ; attempt++ {
		if opts.Port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		c.setPort(port)
		if err := c.writeConf(); err != nil {
			return nil, err
		}
		logOff := fileSize(c.LogFile)
		err = c.startLocked(ctx, "start")
		if err == nil {
			break
		}
		if opts.Port == 0 && attempt < maxPortAttempts && ctx.Err() == nil &&
			portInUse(readFrom(c.LogFile, logOff)) {
			logf("pgcluster: port %d was taken, retrying with another", port)
			continue
		}
		return nil, err
	}
	ok = true
	logf("pgcluster: started on 127.0.0.1:%d (data %s)", c.Port, c.DataDir)
	return c, nil
}

// newCluster makes a cluster's temporary directory, usable by the server
// user, and the Cluster describing it (no data directory yet).
func newCluster(prefix, userName, binDir string, cred *syscall.Credential, logf func(string, ...any), async bool) (*Cluster, error) {
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: create temp dir: %w", err)
	}
	c := &Cluster{
		DataDir:   filepath.Join(base, "data"),
		User:      userName,
		BinDir:    binDir,
		SocketDir: base,
		LogFile:   filepath.Join(base, "postgres.log"),
		baseDir:   base,
		cred:      cred,
		logf:      logf,
		async:     async,
	}
	err = os.Chmod(base, 0o755)
	if err != nil {
		err = fmt.Errorf("pgcluster: chmod %s: %w", base, err)
	} else if cred != nil {
		if err = os.Chown(base, int(cred.Uid), int(cred.Gid)); err != nil {
			err = fmt.Errorf("pgcluster: chown %s to %s: %w", base, userName, err)
		} else if err = checkTraversable(filepath.Dir(base), cred); err != nil {
			err = fmt.Errorf("pgcluster: temp dir not usable by user %s (set TMPDIR to a world-traversable directory): %w", userName, err)
		}
	}
	if err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	return c, nil
}

// Stop shuts the server down (pg_ctl stop -m fast; if that fails, for
// instance because ctx is already done, the server processes are killed)
// and removes the temporary directory. It is idempotent and may be called
// after Kill. If the graceful stop failed, the error says so (wrapping
// ctx.Err() when ctx was done) even though the fallback cleaned up.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	return c.destroyLocked(ctx)
}

// destroyLocked stops the server if it runs and removes the temp dir.
func (c *Cluster) destroyLocked(ctx context.Context) error {
	var errs []error
	if c.runningLocked() {
		c.logf("pgcluster: stopping server on port %d", c.Port)
		if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.DataDir, "-m", "fast", "-w",
			"-t", strconv.Itoa(pgCtlTimeoutSec)); err != nil {
			errs = append(errs, fmt.Errorf("pgcluster: pg_ctl stop: %w: %s", err, strings.TrimSpace(string(out))))
			if kerr := c.killLocked(); kerr != nil && !errors.Is(kerr, errNotRunning) {
				errs = append(errs, kerr)
			}
		}
	}
	if err := os.RemoveAll(c.baseDir); err != nil {
		errs = append(errs, fmt.Errorf("pgcluster: remove %s: %w", c.baseDir, err))
	} else {
		c.removed = true
	}
	return errors.Join(errs...)
}

// Restart restarts the server with pg_ctl restart -m mode, where mode is
// "smart", "fast" or "immediate" ("immediate" makes the server go through
// crash recovery). It keeps the port and data, and returns once the server
// accepts connections again. If the server is not running, it is started.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("pgcluster: invalid restart mode %q (want smart, fast or immediate)", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errors.New("pgcluster: cluster was stopped and removed")
	}
	c.logf("pgcluster: restarting server on port %d (mode %s)", c.Port, mode)
	return c.startLocked(ctx, "restart", "-m", mode)
}

// StartAgain starts the server again on the same data directory and port
// after Kill (or after a failed Restart). It is a no-op if the server is
// already running, and an error after Stop.
func (c *Cluster) StartAgain(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errors.New("pgcluster: cluster was stopped and removed")
	}
	if c.runningLocked() {
		return nil
	}
	c.logf("pgcluster: starting server again on port %d", c.Port)
	return c.startLocked(ctx, "start")
}

// Kill simulates a crash of the database server: it sends SIGKILL to the
// postmaster and (on Linux) to all of its child processes, and returns
// once they are gone. The data directory is left as is; StartAgain or
// Restart bring the server back up through crash recovery.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errors.New("pgcluster: cluster was stopped and removed")
	}
	c.logf("pgcluster: killing server on port %d", c.Port)
	return c.killLocked()
}

// Running reports whether the postmaster is currently alive.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.removed && c.runningLocked()
}

// LogTail returns up to the last n lines of the server log.
func (c *Cluster) LogTail(n int) string {
	b, _ := os.ReadFile(c.LogFile)
	return tail(b, n)
}

var errNotRunning = errors.New("pgcluster: server is not running")

// killLocked SIGKILLs the postmaster and its children and waits for them.
func (c *Cluster) killLocked() error {
	pid, err := c.postmasterPID()
	if err != nil || !alive(pid) {
		return errNotRunning
	}
	// Stop the postmaster first so it cannot fork new children while we
	// collect them; SIGKILL works on a stopped process.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	pids := append([]int{pid}, serverChildren(pid, c.DataDir)...)
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) && p == pid {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			return fmt.Errorf("pgcluster: kill postmaster %d: %w", pid, err)
		}
	}
	deadline := time.Now().Add(killWait)
	for _, p := range pids {
		for alive(p) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgcluster: server process %d still alive %v after SIGKILL", p, killWait)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The dead postmaster was reparented to init, which reaps it when it
	// gets to it (over a second later on some systems). Until then it is
	// a zombie and a new postmaster would take the stale lock files
	// (postmaster.pid and the socket's .lock) for a live server. On Linux
	// every server process is known dead, so the stale lock files are
	// removed right away (crash recovery does not depend on them);
	// elsewhere, wait for the reaping.
	if runtime.GOOS == "linux" {
		if cur, err := c.postmasterPID(); err == nil && cur == pid {
			sock := filepath.Join(c.SocketDir, fmt.Sprintf(".s.PGSQL.%d", c.Port))
			for _, f := range []string{sock + ".lock", sock, filepath.Join(c.DataDir, "postmaster.pid")} {
				if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("pgcluster: remove stale lock file: %w", err)
				}
			}
		}
		return nil
	}
	for exists(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// exists reports whether pid exists at all (zombies included), as seen by
// PostgreSQL's own lock-file check.
func exists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// startLocked runs "pg_ctl <verb> -w ..." and waits until the server
// accepts connections. After Kill, processes of the old server may linger
// for a moment (children on systems where Kill cannot find them, an
// unreaped postmaster); while the log says so and no live postmaster owns
// the data directory, the start is retried for a few seconds.
func (c *Cluster) startLocked(ctx context.Context, verb string, extra ...string) error {
	args := append([]string{verb, "-D", c.DataDir, "-l", c.LogFile, "-w",
		"-t", strconv.Itoa(pgCtlTimeoutSec)}, extra...)
	deadline := time.Now().Add(killWait)
	for {
		logOff := fileSize(c.LogFile)
		out, err := c.run(ctx, "pg_ctl", args...)
		if err == nil {
			break
		}
		newLog := readFrom(c.LogFile, logOff)
		if (bytes.Contains(newLog, []byte("pre-existing shared memory block")) ||
			staleLockRE.Match(newLog)) &&
			!c.runningLocked() &&
			time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return fmt.Errorf("pgcluster: pg_ctl %s (port %d): %w: %s\nserver log tail:\n%s",
			verb, c.Port, err, strings.TrimSpace(string(out)), tail(newLog, logTailLines))
	}
	if err := c.ping(ctx); err != nil {
		return fmt.Errorf("pgcluster: server on port %d started but does not accept connections: %w\nserver log tail:\n%s",
			c.Port, err, c.LogTail(logTailLines))
	}
	return nil
}

// ping connects once with the DSN, retrying briefly: pg_ctl -w already
// waited for the server to be ready, this guards against surprises (and
// checks the DSN itself).
func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conn, err := pgconn.Connect(ctx, c.DSN)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) setPort(port int) {
	c.Port = port
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(c.User),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	c.DSN = u.String()
}

const confName = "pgcluster.conf"

// appendInclude makes postgresql.conf include our settings file, so that
// pg_ctl start/restart always picks up the same settings.
func (c *Cluster) appendInclude() error {
	f, err := os.OpenFile(filepath.Join(c.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# added by pgcluster\ninclude '%s'\n", confName)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: append to postgresql.conf: %w", err)
	}
	return nil
}

func (c *Cluster) writeConf() error {
	// synchronous_commit stays on by default: with fsync=off it costs a
	// write(2) per commit, and it is what makes committed transactions
	// survive a server crash (the WAL is in the OS page cache).
	syncCommit := "on"
	if c.async {
		syncCommit = "off"
	}
	conf := fmt.Sprintf(`# Throwaway cluster settings written by pgcluster.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 200
fsync = off
full_page_writes = off
synchronous_commit = %s
# A standby waiting for WAL from a dead primary sleeps this long between
# attempts, and a promotion waits out the sleep (5s by default).
wal_retrieve_retry_interval = '100ms'
`, c.Port, strings.ReplaceAll(c.SocketDir, "'", "''"), syncCommit)
	path := filepath.Join(c.DataDir, confName)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	if c.cred != nil {
		if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: chown %s: %w", path, err)
		}
	}
	return nil
}

// run runs one of the PostgreSQL binaries as the server user and returns
// its combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	cmd.Dir = c.baseDir
	cmd.Env = childEnv()
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// Own process group: a terminal ^C does not reach pg_ctl/initdb, and
	// cancellation kills initdb together with its postgres children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = stopWaitDelay
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return out.Bytes(), err
}

// childEnv is the current environment without PG* variables, which could
// point pg_ctl/initdb at another cluster, and with a neutral locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func (c *Cluster) runningLocked() bool {
	pid, err := c.postmasterPID()
	return err == nil && alive(pid)
}

// postmasterPID reads the first line of postmaster.pid.
func (c *Cluster) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgcluster: bad postmaster.pid: %q", line)
	}
	return pid, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if runtime.GOOS == "linux" {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// Format: pid (comm) state ...; comm may contain spaces/parens.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			return b[i+2] != 'Z' && b[i+2] != 'X'
		}
	}
	return true
}

// serverChildren lists (on Linux) the processes whose parent is the
// postmaster or whose working directory is the data directory (every
// server process chdirs there). Elsewhere it returns nil and the children
// exit on their own once they notice the postmaster is gone.
func serverChildren(postmaster int, dataDir string) []int {
	if runtime.GOOS != "linux" {
		return nil
	}
	if resolved, err := filepath.EvalSymlinks(dataDir); err == nil {
		dataDir = resolved
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dataDir {
			pids = append(pids, pid)
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(postmaster) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// serverUser returns the database superuser / OS user name and, when we
// are root, the credentials to run the server binaries with.
func serverUser() (string, *syscall.Credential, error) {
	if os.Geteuid() != 0 {
		if u, err := user.Current(); err == nil && u.Username != "" {
			return u.Username, nil, nil
		}
		if name := os.Getenv("USER"); name != "" {
			return name, nil, nil
		}
		// The name only matters for the DSN; initdb -U makes it so.
		return "postgres", nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			errs = append(errs, fmt.Errorf("user %s has unusable uid/gid %s/%s", name, u.Uid, u.Gid))
			continue
		}
		return name, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return "", nil, fmt.Errorf("pgcluster: running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as: %w", errors.Join(errs...))
}

// checkTraversable verifies that the user can search every directory from
// dir up to the root.
func checkTraversable(dir string, cred *syscall.Credential) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		if ok {
			switch {
			case st.Uid == cred.Uid && mode&0o100 != 0,
				st.Uid != cred.Uid && st.Gid == cred.Gid && mode&0o010 != 0,
				st.Uid != cred.Uid && st.Gid != cred.Gid && mode&0o001 != 0:
			default:
				return fmt.Errorf("directory %s (mode %v) is not searchable", d, fi.Mode().Perm())
			}
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: pick a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("pgcluster: pick a free port: %w", err)
	}
	return port, nil
}

func portInUse(log []byte) bool {
	return bytes.Contains(log, []byte("Address already in use")) ||
		bytes.Contains(log, []byte("could not create any TCP/IP sockets"))
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the content of path from offset off (best effort).
func readFrom(path string, off int64) []byte {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return b
	}
	return b[off:]
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FindBinDir locates the PostgreSQL server binaries: the directory of
// initdb if initdb and pg_ctl are both on PATH (in the same directory),
// else the highest version found under /usr/lib/postgresql/*/bin,
// /usr/local/pgsql/bin, /usr/pgsql-*/bin and
// /opt/homebrew/opt/postgresql*/bin. A directory qualifies if it holds
// initdb, pg_ctl and postgres.
func FindBinDir() (string, error) {
	looked := []string{"$PATH"}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if pgctl, err := exec.LookPath("pg_ctl"); err == nil {
			dir := filepath.Dir(initdb)
			if filepath.Dir(pgctl) == dir && checkBinDir(dir) == nil {
				// Prefer the real installation directory when PATH
				// holds symlinks to it (e.g. /usr/local/bin/initdb ->
				// /usr/lib/postgresql/15/bin/initdb).
				if real, err := filepath.EvalSymlinks(initdb); err == nil {
					if rdir := filepath.Dir(real); checkBinDir(rdir) == nil {
						return rdir, nil
					}
				}
				return dir, nil
			}
		}
	}
	type cand struct {
		dir string
		ver []int
	}
	var cands []cand
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",
		"/usr/local/pgsql/bin",
		"/usr/pgsql-*/bin",
		"/opt/homebrew/opt/postgresql*/bin",
	} {
		looked = append(looked, pattern)
		matches, _ := filepath.Glob(pattern)
		for _, dir := range matches {
			if checkBinDir(dir) != nil {
				continue
			}
			cands = append(cands, cand{dir, binVersion(dir)})
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("pgcluster: no PostgreSQL server binaries (initdb, pg_ctl, postgres) found; looked in %s; install PostgreSQL or set Options.BinDir",
			strings.Join(looked, ", "))
	}
	sort.SliceStable(cands, func(i, j int) bool { return versionLess(cands[j].ver, cands[i].ver) })
	return cands[0].dir, nil
}

// checkBinDir verifies that dir holds the executables we need.
func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", filepath.Join(dir, name))
		}
	}
	return nil
}

// staleLockRE matches the server's complaint about a lock file
// (postmaster.pid or the socket's .lock) left by a dead server.
var staleLockRE = regexp.MustCompile(`lock file "[^"\n]*" already exists`)

var versionRE = regexp.MustCompile(`\d+(\.\d+)*`)

// binVersion asks pg_ctl for its version ("pg_ctl (PostgreSQL) 15.8 ..."),
// falling back to the numbers in the directory name.
func binVersion(dir string) []int {
	s := filepath.Dir(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, filepath.Join(dir, "pg_ctl"), "--version").Output(); err == nil {
		if _, after, ok := strings.Cut(string(out), "(PostgreSQL)"); ok {
			s = after
		}
	}
	var v []int
	for _, part := range strings.Split(versionRE.FindString(s), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			break
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}
