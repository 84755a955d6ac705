//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// seed returns CHAOS_SEED, or a fresh one, and prints it first so a failing
// run can be replayed.
func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
		s = n
	}
	fmt.Printf("chaos: %s seed %d (replay: CHAOS_SEED=%d)\n", t.Name(), s, s)
	t.Logf("seed %d (replay: CHAOS_SEED=%d)", s, s)
	return s
}

// scenario is one cell of the failpoint matrix.
type scenario struct {
	name    string
	ordered bool
	// arm is the failpoint spec of slot 0's first incarnation.
	arm string
	// fired names the kill the scenario must have caused ("failpoint X").
	fired string
	// slow0 holds each request of slot 0's first incarnation this long.
	slow0 time.Duration
	// sigterm0 shuts slot 0's first incarnation down mid-batch.
	sigterm0 bool
	// sigterm1 also shuts slot 1 down mid-batch once slot 0's fault fired.
	sigterm1 bool
	// args are extra flags for every worker.
	args []string
	// pause0 SIGSTOPs slot 0's first incarnation this long while it holds
	// a batch, before the other slots start.
	pause0 time.Duration
	// cutOnResume keeps slot 0's database link cut for this long after
	// the pause ends (it is cut during the pause).
	cutOnResume time.Duration
	// upFront is how many messages are committed before any worker starts
	// (default 120).
	upFront int
}

var matrix = []scenario{
	{name: "after-claim", arm: "after-claim=kill@1", fired: "failpoint after-claim"},
	{name: "mid-publish", arm: "mid-publish=kill-after:300ms", fired: "failpoint mid-publish", slow0: 700 * time.Millisecond},
	{name: "after-publish", arm: "after-publish=kill@3", fired: "failpoint after-publish"},
	{name: "in-finalize", arm: "in-finalize=kill@1", fired: "failpoint in-finalize"},
	{name: "sigterm-mid-batch", sigterm0: true, slow0: 300 * time.Millisecond},
	{name: "ordered", ordered: true, arm: "after-publish=kill@2", fired: "failpoint after-publish", sigterm1: true},
	{name: "ordered-in-finalize", ordered: true, arm: "in-finalize=kill@1", fired: "failpoint in-finalize"},
	// One attempt only: the killed worker's rows are reaped to dead by the
	// next claim once their lease expires, delivered or not.
	// Heartbeats let publishes outlive the lease. A pause past the lease,
	// with nobody else running, then a short cut of its database link
	// (which delays its heartbeat and its fenced-off finalizes) makes the
	// worker re-claim its own rows while the old leases are unsettled; the
	// new leases must keep being heartbeated through their slow publishes,
	// or the others take them over: unexplained duplicates.
	{name: "pause-reclaim-heartbeat", slow0: 3 * time.Second, pause0: 2500 * time.Millisecond, upFront: 4,
		cutOnResume: 300 * time.Millisecond,
		args:        []string{"--heartbeat", "500ms", "--publish-timeout", "5s"}},
	{name: "reap-after-kill", arm: "after-publish=kill@2", fired: "failpoint after-publish", args: []string{"--max-attempts", "1"}},
}

// TestFailpointMatrix is tier 1: each failpoint (and a SIGTERM mid-batch,
// and ordered mode) on a small message count, deterministically: the fault
// always fires, on the first worker, while it holds a batch.
func TestFailpointMatrix(t *testing.T) {
	t.Parallel()
	s := seed(t)
	e := newEnv(t)
	for i, sc := range matrix {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, e, sc, s+uint64(i))
		})
	}
}

func runScenario(t *testing.T, e *env, sc scenario, seed uint64) {
	const total = 200
	upFront := 120
	if sc.upFront > 0 {
		upFront = sc.upFront
	}
	aggs := 60
	if sc.ordered {
		aggs = 6
	}
	r := newRun(t, e, runConfig{
		name: "matrix-" + sc.name, tier: "1-failpoint-matrix",
		lease: 2 * time.Second, publishTimeout: 800 * time.Millisecond, drainTimeout: 60 * time.Second,
		allowReap: sc.name == "reap-after-kill",
		groups: []groupConfig{{
			name: "m", ordered: sc.ordered, slots: 3, aggregates: aggs, producers: 2, rollbackP: 0.1,
			slotArgs: func(int) []string { return sc.args },
			arm: func(slot, inc int) string {
				if slot == 0 && inc == 0 {
					return sc.arm
				}
				return ""
			},
		}},
	}, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.produce(ctx, upFront)
	r.phaseStart = time.Now()
	g := r.groups[0]
	s0 := g.slots[0]
	owner0 := s0.owner(0)
	if sc.slow0 > 0 {
		r.rec.setFaults(sinkFaults{delay: sc.slow0, delayOwner: owner0})
	}
	// Slot 0 starts alone, so the fault hits it while it holds a batch.
	r.startSlot(s0)
	if sc.sigterm0 {
		if !waitFor(20*time.Second, func() bool { return r.rec.countBy(owner0) >= 4 }) {
			t.Fatalf("%s never delivered", owner0)
		}
		r.terminate(s0, s0.current(), 15*time.Second)
		if !waitFor(20*time.Second, func() bool { return r.hasEvent("exit", s0.name, "graceful") }) {
			t.Fatalf("%s did not shut down gracefully after SIGTERM: %+v", owner0, r.ev.snapshot())
		}
	}
	if sc.pause0 > 0 {
		if !waitFor(20*time.Second, func() bool { return r.rec.countBy(owner0) >= sc.upFront }) {
			t.Fatalf("%s never delivered", owner0)
		}
		p := s0.current()
		i := r.ev.add(event{Kind: faultSigstop, Slot: s0.name, Owner: p.owner, Start: time.Now()})
		_ = p.signal(syscall.SIGSTOP)
		time.Sleep(sc.pause0)
		var cut int
		if sc.cutOnResume > 0 {
			cut = r.ev.add(event{Kind: faultDBCut, Slot: s0.name, Owner: p.owner, Start: time.Now()})
			s0.dbProxy.Cut()
		}
		_ = p.signal(syscall.SIGCONT)
		r.ev.end(i, time.Now())
		if sc.cutOnResume > 0 {
			time.Sleep(sc.cutOnResume)
			s0.dbProxy.Restore()
			r.ev.end(cut, time.Now())
		}
		// The others start once it has had time to re-claim, and take
		// over whatever lease it then fails to keep.
		time.Sleep(time.Second)
		r.startAll()
		time.Sleep(2 * sc.slow0)
	}
	if sc.fired != "" && !waitFor(20*time.Second, func() bool { return r.hasEvent("kill", s0.name, sc.fired) }) {
		t.Fatalf("%s never fired on %s: %+v", sc.fired, owner0, r.ev.snapshot())
	}
	r.rec.setFaults(sinkFaults{})
	if sc.sigterm1 {
		s1 := g.slots[1]
		owner1 := s1.owner(0)
		r.rec.setFaults(sinkFaults{delay: 300 * time.Millisecond, delayOwner: owner1})
		r.startSlot(s1)
		if !waitFor(20*time.Second, func() bool { return r.rec.countBy(owner1) >= 2 }) {
			t.Fatalf("%s never delivered", owner1)
		}
		r.terminate(s1, s1.current(), 15*time.Second)
		if !waitFor(20*time.Second, func() bool { return r.hasEvent("exit", s1.name, "graceful") }) {
			t.Fatalf("%s did not shut down gracefully after SIGTERM", owner1)
		}
		r.rec.setFaults(sinkFaults{})
	}
	r.startAll()
	r.startProducers(20*time.Millisecond, total)
	waitFor(20*time.Second, func() bool { return g.led.size() >= total })
	r.phaseEnd = time.Now()
	rep := r.finish()
	if sc.name == "reap-after-kill" && rep.Reaped == 0 {
		t.Errorf("no row was reaped")
	}
	if rep.Committed < total {
		t.Errorf("only %d messages committed, want %d", rep.Committed, total)
	}
	if sc.sigterm0 || sc.sigterm1 {
		// A graceful shutdown finalizes what it published and releases
		// the rest: it must cause no duplicate at all.
		for cause, n := range rep.DuplicatesByCause {
			if cause != "holder_kill" && n > 0 && !sc.ordered {
				t.Errorf("graceful shutdown caused %d duplicates (%s)", n, cause)
			}
		}
	}
}

// randomConfig is the shape of the random-fault tiers: an unordered table
// with three workers (one with heartbeats, one polling without NOTIFY) and
// an ordered table with two (the second with heartbeats), one event type
// of each relayed through a rate- and concurrency-limited route. The classes add
// their failpoints to each incarnation's and, for ordered_run, make the
// ordered workers poll rarely.
func randomConfig(name, tier string, s uint64, c classSet) runConfig {
	const lease = 3 * time.Second
	arm := func(slot, inc int) string {
		// Slots 1 (u1) and 11 (o1) run with heartbeats.
		fps, alone := classArm(c, s, slot, inc, slot%10 == 1, lease)
		if base := baseArm(s, slot, inc); base != "" && !alone {
			fps = append([]string{base}, fps...)
		}
		return strings.Join(fps, ",")
	}
	orderedArgs := func(i int) []string {
		var out []string
		if i == 1 {
			out = append(out, "--heartbeat", "1s")
		}
		if c.has(classOrderedRun) {
			out = append(out, "--poll-interval", orderedPollInterval.String())
		}
		return out
	}
	return runConfig{
		name: name, tier: tier, lease: lease, publishTimeout: time.Second, drainTimeout: 90 * time.Second, classes: c,
		pipelines: true,
		groups: []groupConfig{
			{name: "u", slots: 3, aggregates: 40, producers: 2, rollbackP: 0.1, arm: arm, limited: true,
				slotArgs: func(i int) []string {
					switch i {
					case 1:
						return []string{"--heartbeat", "1s"}
					case 2:
						return []string{"--no-notify"}
					}
					return nil
				}},
			{name: "o", ordered: true, slots: 2, aggregates: 6, producers: 1, rollbackP: 0.1, limited: true,
				arm:      func(slot, inc int) string { return arm(slot+10, inc) },
				slotArgs: orderedArgs},
		},
	}
}

// baseArm draws the crash failpoints of an incarnation.
func baseArm(s uint64, slot, inc int) string {
	// Deterministic per (seed, slot, incarnation). First incarnations take
	// the four failpoints in turn (the five slots are numbered 0-2 and
	// 10-11, which covers all four residues), so each fires in every run;
	// later ones are armed at random.
	rng := rand.New(rand.NewPCG(s, uint64(slot)<<32|uint64(inc)))
	kind := (slot + int(s%4)) % 4
	if inc > 0 {
		if rng.Float64() > 0.4 {
			return ""
		}
		kind = rng.IntN(4)
	}
	switch kind {
	case 0:
		return fmt.Sprintf("after-claim=kill@%d", 2+rng.IntN(12))
	case 1:
		return fmt.Sprintf("after-publish=kill@%d", 10+rng.IntN(150))
	case 2:
		return fmt.Sprintf("in-finalize=kill@%d", 2+rng.IntN(20))
	default:
		// Fires when a sink hang (or a slow answer) holds a publish.
		return "mid-publish=kill-after:600ms"
	}
}

// leaseMode reads CHAOS_LEASE_MODE (row, shard or cursor), or draws the
// mode from the seed, and prints it next to the seed.
func leaseMode(t *testing.T, s uint64) string {
	t.Helper()
	modes := []string{leaseRow, leaseShard, leaseCursor}
	mode := modes[rand.New(rand.NewPCG(s, 0x1ea5e)).IntN(len(modes))]
	if v := os.Getenv("CHAOS_LEASE_MODE"); v != "" {
		if !slices.Contains(modes, v) {
			t.Fatalf("CHAOS_LEASE_MODE=%q: must be %q, %q or %q", v, leaseRow, leaseShard, leaseCursor)
		}
		mode = v
	}
	fmt.Printf("chaos: %s lease mode %s (CHAOS_LEASE_MODE=%q)\n", t.Name(), mode, os.Getenv("CHAOS_LEASE_MODE"))
	return mode
}

// withLeaseMode runs cfg's workers in mode; each group keeps its order,
// which means the same under both.
func withLeaseMode(cfg runConfig, mode string) runConfig {
	cfg.leaseMode = mode
	return cfg
}

// runClasses reads CHAOS_CLASSES and prints the set next to the seed.
func runClasses(t *testing.T) classSet {
	t.Helper()
	c, err := classesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("chaos: %s classes %s (CHAOS_CLASSES=%q)\n", t.Name(), c, os.Getenv("CHAOS_CLASSES"))
	return c
}

func randomRun(t *testing.T, name, tier string, dur, idleTx time.Duration) {
	s := seed(t)
	c := runClasses(t)
	e := newEnv(t)
	r := newRun(t, e, withLeaseMode(randomConfig(name, tier, s, c), leaseMode(t, s)), s)
	faults := planFrom(menuFor(weightedFaults, c, true), rand.New(rand.NewPCG(s, 1)), dur, len(r.allSlots()), r.cfg.lease, idleTx)
	r.startAll()
	r.startProducers(60*time.Millisecond, 0)
	r.phaseStart = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	r.chaos(ctx, faults)
	<-ctx.Done()
	r.phaseEnd = time.Now()
	rep := r.finish()
	if rep.Committed == 0 || rep.DeliveredUnique == 0 {
		t.Errorf("nothing went through: %+v", rep.counts)
	}
}

// TestRandomFaults is tier 2: 90 seconds of faults drawn from the seed.
func TestRandomFaults(t *testing.T) {
	t.Parallel()
	dur := 90 * time.Second
	if v := os.Getenv("CHAOS_CI_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	randomRun(t, "random", "2-random-90s", dur, 20*time.Second)
}

// TestSoak is tier 3, run by hand: CHAOS_DURATION of random faults (30m
// by default with make chaos-soak), the idle transaction pinning xmin for
// minutes.
func TestSoak(t *testing.T) {
	t.Parallel()
	v := os.Getenv("CHAOS_DURATION")
	if v == "" {
		t.Skip("set CHAOS_DURATION (make chaos-soak) to run the soak")
	}
	dur, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("CHAOS_DURATION=%q: %v", v, err)
	}
	idle := min(3*time.Minute, dur/4)
	randomRun(t, "soak", "3-soak", dur, idle)
}
