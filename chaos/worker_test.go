//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// outboxdBinary builds outboxd with failpoints once per test binary
// (CHAOS_OUTBOXD names a prebuilt one instead).
func outboxdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("CHAOS_OUTBOXD"); p != "" {
			binPath = p
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		// One directory per test process; those of processes that are gone
		// are swept here, so runs leave at most one build behind.
		base := filepath.Join(os.TempDir(), "outboxd-chaos")
		olds, _ := os.ReadDir(base)
		for _, o := range olds {
			if pid, err := strconv.Atoi(o.Name()); err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
				_ = os.RemoveAll(filepath.Join(base, o.Name()))
			}
		}
		dir := filepath.Join(base, strconv.Itoa(os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "outboxd")
		cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", binPath, "./cmd/outboxd")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build -tags failpoints: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is one incarnation of an outboxd process.
type proc struct {
	owner   string
	cmd     *exec.Cmd
	logPath string
	armed   string // OUTBOXD_FAILPOINTS
	started time.Time
	exited  chan struct{}

	mu         sync.Mutex
	terminated bool // SIGTERM sent
	killed     bool // SIGKILL sent by the harness
}

func (p *proc) signal(sig syscall.Signal) error {
	if p.cmd.Process == nil {
		return os.ErrProcessDone
	}
	return syscall.Kill(p.cmd.Process.Pid, sig)
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// slot is one worker position: a supervisor restarts its process (a new
// incarnation with a new owner) whenever it dies, like systemd would.
type slot struct {
	r         *run
	g         *group
	name      string // e.g. "u1"
	dbProxy   *proxy
	sinkProxy *proxy
	extraArgs []string
	// arm returns the failpoints for an incarnation ("" for none).
	arm func(incarnation int) string

	mu          sync.Mutex
	cur         *proc
	incarnation int
	done        chan struct{}
}

func (s *slot) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// limitedRoute is the route of a limited group's slots, its URL to come:
// one event type of four, 60 a second and 3 at once over the table's
// dispatchers.
const limitedRoute = "name=limited,rate=60,burst=5,concurrency=3,event_type=Event0="

func (s *slot) owner(incarnation int) string { return fmt.Sprintf("%s-%d", s.name, incarnation) }

func (s *slot) start() (*proc, error) {
	s.mu.Lock()
	inc := s.incarnation
	s.incarnation++
	s.mu.Unlock()
	r := s.r
	owner := s.owner(inc)
	dsn := fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable&application_name=%s&connect_timeout=5",
		r.env.db().User, s.dbProxy.Addr(), owner)
	sink := fmt.Sprintf("http://%s/deliver/%s/%s", s.sinkProxy.Addr(), s.g.name, owner)
	if r.nats != nil {
		sink = r.nats.sinkURL(s.sinkProxy.Addr(), s.g.name, owner)
	}
	args := []string{"run",
		"--dsn", dsn,
		"--table", s.g.table,
		"--sink", sink,
		"--owner", owner,
		"--workers", "4",
		"--batch", "10",
		"--lease", r.cfg.lease.String(),
		"--publish-timeout", r.cfg.publishTimeout.String(),
		"--poll-interval", "200ms",
		"--retry-base", "50ms",
		"--retry-cap", "1s",
		"--defer-delay", "300ms",
		"--max-attempts", "1000",
		"--log-level", "info",
	}
	if s.g.cfg.ordered {
		args = append(args, "--ordered")
	}
	if sharded(r.cfg.leaseMode) {
		args = append(args, "--lease-mode", r.cfg.leaseMode)
	}
	args = append(args, s.extraArgs...)
	if s.g.cfg.limited && s != r.pipelineSlot {
		args = append(args, "--route", limitedRoute+sink)
	}
	if s == r.pipelineSlot {
		// The table is the pipeline's: --table gives way to the file.
		i := slices.Index(args, "--table")
		args = slices.Delete(args, i, i+2)
		file, err := r.side.file(s, owner, "http://"+s.sinkProxy.Addr())
		if err != nil {
			return nil, err
		}
		args = append(args, "--config", file)
	}
	armed := ""
	if s.arm != nil && !r.calm.Load() {
		armed = s.arm(inc)
	}
	cmd := exec.Command(r.env.bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	if armed != "" {
		cmd.Env = append(cmd.Env, "OUTBOXD_FAILPOINTS="+armed,
			fmt.Sprintf("OUTBOXD_FAILPOINT_SEED=%d", r.seed^uint64(inc)<<8^uint64(len(s.name))))
	}
	logPath := filepath.Join(r.dir, "logs", owner+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "# %s\n# OUTBOXD_FAILPOINTS=%s\n", strings.Join(args, " "), armed)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group, so cleanup reaches anything it spawns; and a
	// parent-death signal, so a test binary killed by its timeout leaves no
	// outboxd behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{owner: owner, cmd: cmd, logPath: logPath, armed: armed, started: time.Now(), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	s.mu.Lock()
	s.cur = p
	s.mu.Unlock()
	r.ev.add(event{Kind: "start", Slot: s.name, Owner: owner, Start: p.started, End: p.started, Detail: armed})
	return p, nil
}

// supervise keeps the slot's process running until ctx ends.
func (s *slot) supervise(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		p, err := s.start()
		if err != nil {
			s.r.t.Errorf("starting %s: %v", s.name, err)
			return
		}
		select {
		case <-p.exited:
		case <-ctx.Done():
			s.stopProc(p, 15*time.Second)
			return
		}
		s.noteExit(p)
		sleepCtx(ctx, s.r.cfg.restartDelay)
	}
}

// noteExit records how an incarnation ended.
func (s *slot) noteExit(p *proc) {
	now := time.Now()
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	p.mu.Lock()
	killedByUs, termed := p.killed, p.terminated
	p.mu.Unlock()
	logTail := tailFile(p.logPath, 4096)
	e := event{Slot: s.name, Owner: p.owner, Start: now, End: now}
	switch {
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		e.Kind = "kill"
		switch {
		case failpointKill.MatchString(logTail):
			// The last one: error texts of publish-error name their
			// failpoint too, but never end in SIGKILL.
			m := failpointKill.FindAllString(logTail, -1)
			e.Detail = m[len(m)-1]
		case termed:
			e.Detail = "SIGKILL after SIGTERM grace period"
		case killedByUs:
			e.Detail = "SIGKILL from outside"
		default:
			e.Detail = "SIGKILL (unknown sender)"
		}
	case termed && ws.Exited() && ws.ExitStatus() == 0:
		e.Kind, e.Detail = "exit", "graceful after SIGTERM"
	default:
		e.Kind, e.Detail = "crash", p.cmd.ProcessState.String()
		if i := strings.LastIndex(logTail, "outboxd: "); i >= 0 {
			e.Detail += ": " + strings.TrimSpace(strings.SplitN(logTail[i:], "\n", 2)[0])
		}
	}
	s.r.ev.add(e)
}

// failpointKill is the line a failpoint writes before it kills its process.
var failpointKill = regexp.MustCompile(`failpoint [a-z-]+: SIGKILL`)

// stopProc ends p gracefully, killing it after grace.
func (s *slot) stopProc(p *proc, grace time.Duration) {
	p.mu.Lock()
	p.terminated = true
	p.mu.Unlock()
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.mu.Lock()
		p.killed = true
		p.mu.Unlock()
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	s.noteExit(p)
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// countInLog counts lines containing needle in every log of the run.
func countInLogs(dir, needle string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n += bytes.Count(b, []byte(needle))
	}
	return n
}

// event is one thing that happened to the system: a fault (with the
// interval it was in force) or a process lifecycle step.
type event struct {
	Kind   string    `json:"kind"`
	Slot   string    `json:"slot,omitempty"`  // targeted worker slot; empty for global faults
	Owner  string    `json:"owner,omitempty"` // targeted incarnation
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Detail string    `json:"detail,omitempty"`
	// RecoveryMS: from End to the first acknowledged delivery after it by
	// the targeted slot, or by anyone for a global fault (filled by the
	// checker).
	RecoveryMS *int64 `json:"recovery_ms,omitempty"`
}

type eventLog struct {
	mu     sync.Mutex
	events []event
}

func (l *eventLog) add(e event) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	return len(l.events) - 1
}

func (l *eventLog) end(i int, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[i].End = t
}

// endWith ends event i at t and replaces its detail.
func (l *eventLog) endWith(i int, t time.Time, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[i].End = t
	l.events[i].Detail = detail
}

func (l *eventLog) snapshot() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events...)
}
