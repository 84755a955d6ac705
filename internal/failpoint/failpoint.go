//go:build failpoints

// Package failpoint lets the fault-injection suite crash or stall outboxd at
// chosen points. It exists only in binaries built with -tags failpoints;
// in every other build its functions are empty and Enabled is false, so the
// calls compile away.
//
// OUTBOXD_FAILPOINTS configures it: a comma-separated list of NAME=ACTION,
// where ACTION is
//
//	kill          SIGKILL this process at the first hit
//	kill@N        SIGKILL at the N-th hit
//	kill%P        SIGKILL at each hit with probability P (0..1), drawn from
//	              OUTBOXD_FAILPOINT_SEED
//	sleep:DUR     sleep DUR at every hit
//	kill-after:DUR (for During) SIGKILL if the guarded section is still
//	              running DUR after it began
//	hang@N:DUR    (for Error) block the N-th hit for DUR, ignoring every
//	              context, then fail it; DUR 0 blocks until the process is
//	              killed
//	hang%P:DUR    (for Error) the same, at each hit with probability P
//	error%P       (for Error) fail each hit with probability P, with an
//	              error text of arbitrary bytes: NUL, invalid UTF-8, control
//	              characters, up to 96 KiB
package failpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

type point struct {
	action string // kill, killp, sleep, kill-after, hang, hangp, errorp
	n      int64
	p      float64
	d      time.Duration
	hits   int64
}

var (
	mu     sync.Mutex
	points = map[string]*point{}
	rng    *rand.Rand
)

func init() {
	seed, _ := strconv.ParseUint(os.Getenv("OUTBOXD_FAILPOINT_SEED"), 10, 64)
	rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ps, err := parse(os.Getenv("OUTBOXD_FAILPOINTS"))
	if err != nil {
		panic(err)
	}
	points = ps
}

// parse reads an OUTBOXD_FAILPOINTS spec.
func parse(spec string) (map[string]*point, error) {
	out := map[string]*point{}
	if spec == "" {
		return out, nil
	}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("failpoint: %q: want NAME=ACTION", item)
		}
		p, err := parseAction(action)
		if err != nil {
			return nil, fmt.Errorf("failpoint: %q: %w", item, err)
		}
		out[name] = p
	}
	return out, nil
}

func parseAction(action string) (*point, error) {
	verb, arg, _ := strings.Cut(action, ":")
	p := &point{}
	switch {
	case action == "kill":
		p.action, p.n = "kill", 1
		return p, nil
	case strings.HasPrefix(verb, "kill@"), strings.HasPrefix(verb, "hang@"):
		n, err := strconv.ParseInt(verb[5:], 10, 64)
		if err != nil || n < 1 {
			return nil, errors.New("bad count")
		}
		p.action, p.n = verb[:4], n
	case strings.HasPrefix(verb, "kill%"), strings.HasPrefix(verb, "hang%"), strings.HasPrefix(verb, "error%"):
		head, prob, _ := strings.Cut(verb, "%")
		f, err := strconv.ParseFloat(prob, 64)
		if err != nil || f < 0 || f > 1 {
			return nil, errors.New("bad probability")
		}
		p.action, p.p = head+"p", f
	case verb == "sleep", verb == "kill-after":
		p.action = verb
	default:
		return nil, errors.New("unknown action")
	}
	needsDur := p.action == "sleep" || p.action == "kill-after" || p.action == "hang" || p.action == "hangp"
	if needsDur != (arg != "") {
		return nil, errors.New("bad duration")
	}
	if needsDur {
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return nil, errors.New("bad duration")
		}
		p.d = d
	}
	return p, nil
}

// Armed reports whether name has an action configured.
func Armed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := points[name]
	return ok
}

// Hit runs name's action, if any.
func Hit(name string) {
	mu.Lock()
	p, ok := points[name]
	if !ok {
		mu.Unlock()
		return
	}
	p.hits++
	kill := (p.action == "kill" && p.hits == p.n) || (p.action == "killp" && rng.Float64() < p.p)
	sleep := p.action == "sleep"
	d := p.d
	mu.Unlock()
	switch {
	case kill:
		die(name)
	case sleep:
		time.Sleep(d)
	}
}

// Error runs name's action and returns the error it injects, if any: a hang
// that ignores every context and then fails (hang@N, hang%P), or a failure
// whose text is arbitrary bytes (error%P). Other actions run as for Hit.
func Error(name string) error {
	mu.Lock()
	p, ok := points[name]
	if !ok {
		mu.Unlock()
		return nil
	}
	var hang, fail bool
	var text string
	switch p.action {
	case "hang":
		p.hits++
		hang = p.hits == p.n
	case "hangp":
		hang = rng.Float64() < p.p
	case "errorp":
		if fail = rng.Float64() < p.p; fail {
			text = badText(rng)
		}
	default:
		mu.Unlock()
		Hit(name)
		return nil
	}
	d := p.d
	mu.Unlock()
	switch {
	case hang:
		return hangFor(name, d)
	case fail:
		return errors.New("failpoint " + name + ": receiver said: " + text)
	}
	return nil
}

// hangFor blocks d (forever when 0), whatever the caller's context says.
func hangFor(name string, d time.Duration) error {
	fmt.Fprintf(os.Stderr, "failpoint %s: hanging %v, ignoring the context\n", name, d)
	if d == 0 {
		select {}
	}
	time.Sleep(d)
	return fmt.Errorf("failpoint %s: the sink hung %v", name, d)
}

// badText draws an error text such as a careless sink builds from a
// receiver's reply: NUL bytes, invalid UTF-8, control characters, quotes,
// sometimes tens of KiB.
func badText(r *rand.Rand) string {
	pieces := []string{"\x00", "\xff\xfe", "\xc3\x28", "\xed\xa0\x80", "\x1b[31m", "\r\n", "\t", "'\"\\",
		"%s%!d", "\u2028", "日本語", "\x7f", "\xf0\x28\x8c\xbc"}
	var b strings.Builder
	for range 1 + r.IntN(12) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	if r.IntN(4) == 0 {
		// Very long, with a NUL deep inside.
		b.WriteString(strings.Repeat("x", 8<<10+r.IntN(88<<10)))
		b.WriteString("\x00end")
	}
	return b.String()
}

// During guards a section (a publish): with kill-after:DUR it kills the
// process if the section is still running DUR after it began; other actions
// run as for Hit at the start. Call the returned func when the section ends.
func During(name string) func() {
	mu.Lock()
	p, ok := points[name]
	mu.Unlock()
	if !ok {
		return func() {}
	}
	if p.action != "kill-after" {
		Hit(name)
		return func() {}
	}
	t := time.AfterFunc(p.d, func() { die(name) })
	return func() { t.Stop() }
}

func die(name string) {
	fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
