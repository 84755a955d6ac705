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
package failpoint

import (
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
	action string
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
	spec := os.Getenv("OUTBOXD_FAILPOINTS")
	if spec == "" {
		return
	}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			panic(fmt.Sprintf("failpoint: %q: want NAME=ACTION", item))
		}
		p := &point{action: action}
		switch {
		case action == "kill":
			p.action, p.n = "kill", 1
		case strings.HasPrefix(action, "kill@"):
			n, err := strconv.ParseInt(action[5:], 10, 64)
			if err != nil || n < 1 {
				panic(fmt.Sprintf("failpoint: %q: bad count", item))
			}
			p.action, p.n = "kill", n
		case strings.HasPrefix(action, "kill%"):
			f, err := strconv.ParseFloat(action[5:], 64)
			if err != nil || f < 0 || f > 1 {
				panic(fmt.Sprintf("failpoint: %q: bad probability", item))
			}
			p.action, p.p = "killp", f
		case strings.HasPrefix(action, "sleep:"), strings.HasPrefix(action, "kill-after:"):
			verb, dur, _ := strings.Cut(action, ":")
			d, err := time.ParseDuration(dur)
			if err != nil {
				panic(fmt.Sprintf("failpoint: %q: bad duration", item))
			}
			p.action, p.d = verb, d
		default:
			panic(fmt.Sprintf("failpoint: %q: unknown action", item))
		}
		points[name] = p
	}
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
