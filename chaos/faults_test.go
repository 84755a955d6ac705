//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fault kinds. Each is drawn from the run's seed: which, when, on which
// slot and for how long.
const (
	faultSigkill       = "sigkill"
	faultSigstop       = "sigstop"
	faultSigterm       = "sigterm"
	faultDBCut         = "db_cut"
	faultDBBlackHole   = "db_blackhole"
	faultDBReset       = "db_reset"
	faultSinkCut       = "sink_cut"
	faultSinkBlackHole = "sink_blackhole"
	faultSinkReset     = "sink_reset"
	faultTerminate     = "terminate_backend"
	faultPGRestart     = "pg_restart"
	faultFailover      = "failover"
	faultSink5xx       = "sink_5xx"
	faultSink429       = "sink_429"
	faultSink425       = "sink_425"
	faultSinkHang      = "sink_hang"
	faultSinkDrop      = "sink_drop"
	faultIdleTx        = "idle_in_tx"
	faultSinkBadText   = "sink_badtext"
	faultSinkAuth      = "sink_auth"
	faultSinkReject    = "sink_reject"
	faultMigrate       = "migrate"
	// faultHeldProducer: a producer transaction inserts, then stays open
	// across many batches before it commits: rows with low ids that
	// become visible late (what snapshot cursors must never skip).
	faultHeldProducer    = "held_producer"
	faultOperatorPause   = "operator_pause"
	faultFailpointArming = "failpoint" // not scheduled: armed on incarnations
)

// weightedFault is one entry of a menu of faults.
type weightedFault struct {
	kind   string
	weight int
}

// weightedFaults is the random tiers' menu.
var weightedFaults = []weightedFault{
	{faultSigkill, 2}, {faultSigstop, 2}, {faultSigterm, 2},
	{faultDBCut, 2}, {faultDBBlackHole, 2}, {faultDBReset, 1},
	{faultSinkCut, 1}, {faultSinkBlackHole, 1},
	{faultTerminate, 2}, {faultPGRestart, 1},
	{faultSink5xx, 2}, {faultSink429, 2}, {faultSink425, 2}, {faultSinkHang, 2}, {faultSinkDrop, 2},
	{faultIdleTx, 1}, {faultHeldProducer, 1}, {faultOperatorPause, 1},
}

// planned is one fault drawn by the scheduler, with every parameter fixed
// up front so a seed replays the same plan.
type planned struct {
	at       time.Duration // after the phase started
	kind     string
	slot     int // index into allSlots
	dur      time.Duration
	prob     float64
	allSlots bool
	code     int // the HTTP status of a sink_auth window
}

// planFrom draws a fault schedule from menu.
func planFrom(menu []weightedFault, rng *rand.Rand, phase time.Duration, nSlots int, lease, idleTx time.Duration) []planned {
	total := 0
	for _, w := range menu {
		total += w.weight
	}
	// Every kind once first, in an order drawn from the seed, so even a
	// short run meets each fault; then weighted draws.
	first := make([]string, len(menu))
	for i, w := range menu {
		first[i] = w.kind
	}
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	var out []planned
	at := time.Duration(0)
	for {
		at += time.Duration(700+rng.IntN(1800)) * time.Millisecond
		if at >= phase-2*time.Second {
			return out
		}
		kind := ""
		if len(out) < len(first) {
			kind = first[len(out)]
		} else {
			n := rng.IntN(total)
			for _, w := range menu {
				if n < w.weight {
					kind = w.kind
					break
				}
				n -= w.weight
			}
		}
		p := planned{at: at, kind: kind, slot: rng.IntN(nSlots), prob: 0.3 + 0.6*rng.Float64()}
		switch kind {
		case faultSigstop:
			p.dur = lease + time.Duration(300+rng.IntN(2000))*time.Millisecond
		case faultDBBlackHole, faultSinkBlackHole:
			p.dur = time.Duration(500+rng.IntN(int(lease/time.Millisecond)+1500)) * time.Millisecond
		case faultDBCut, faultSinkCut:
			p.dur = time.Duration(300+rng.IntN(3000)) * time.Millisecond
		case faultSink5xx, faultSink429, faultSink425, faultSinkHang, faultSinkDrop:
			p.dur = time.Duration(800+rng.IntN(2500)) * time.Millisecond
		case faultIdleTx:
			p.dur = idleTx
		case faultHeldProducer:
			p.dur = time.Duration(2000+rng.IntN(4000)) * time.Millisecond
		case faultOperatorPause:
			p.dur = time.Duration(1000+rng.IntN(4000)) * time.Millisecond
			p.allSlots = rng.IntN(3) == 0
		case faultTerminate, faultMigrate:
			p.allSlots = rng.IntN(2) == 0
		case faultSinkBadText, faultSinkReject:
			p.dur = time.Duration(800+rng.IntN(2500)) * time.Millisecond
		case faultSinkAuth:
			// A rotation outlasts a retry or two; one worker's stale
			// credential, or everyone's.
			p.dur = time.Duration(1000+rng.IntN(4000)) * time.Millisecond
			p.allSlots = rng.IntN(2) == 0
			p.code = 401
			if rng.IntN(2) == 0 {
				p.code = 403
			}
		}
		out = append(out, p)
	}
}

// chaos runs the plan until it is exhausted or ctx ends.
func (r *run) chaos(ctx context.Context, faults []planned) {
	start := time.Now()
	for _, f := range faults {
		sleepCtx(ctx, time.Until(start.Add(f.at)))
		if ctx.Err() != nil {
			return
		}
		r.inject(ctx, f)
	}
}

// inject starts one fault; it ends by itself after its duration.
func (r *run) inject(ctx context.Context, f planned) {
	slots := r.allSlots()
	s := slots[f.slot%len(slots)]
	p := s.current()
	owner := ""
	if p != nil {
		owner = p.owner
	}
	interval := func(kind, detail string, d time.Duration, begin, end func()) {
		r.faultWG.Add(1)
		go func() {
			defer r.faultWG.Done()
			i := r.ev.add(event{Kind: kind, Slot: s.name, Owner: owner, Start: time.Now(), Detail: detail})
			begin()
			sleepCtx(ctx, d)
			end()
			r.ev.end(i, time.Now())
		}()
	}
	sinkFault := func(set func(*sinkFaults, float64)) {
		r.faultWG.Add(1)
		go func() {
			defer r.faultWG.Done()
			i := r.ev.add(event{Kind: f.kind, Start: time.Now(), Detail: fmt.Sprintf("p=%.2f", f.prob)})
			r.rec.updateFaults(func(sf *sinkFaults) { set(sf, f.prob) })
			sleepCtx(ctx, f.dur)
			r.rec.updateFaults(func(sf *sinkFaults) { set(sf, 0) })
			r.ev.end(i, time.Now())
		}()
	}
	switch f.kind {
	case faultSigkill:
		if p == nil || !p.alive() {
			return
		}
		p.mu.Lock()
		p.killed = true
		p.mu.Unlock()
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		// The supervisor logs the kill when it reaps the process.
	case faultSigstop:
		if p == nil || !p.alive() {
			return
		}
		interval(faultSigstop, "", f.dur,
			func() { _ = p.signal(syscall.SIGSTOP) },
			func() { _ = p.signal(syscall.SIGCONT) })
	case faultSigterm:
		if p == nil || !p.alive() {
			return
		}
		r.terminate(s, p, 15*time.Second)
	case faultDBCut:
		interval(f.kind, "", f.dur, s.dbProxy.Cut, s.dbProxy.Restore)
	case faultDBBlackHole:
		interval(f.kind, "", f.dur, s.dbProxy.BlackHole, s.dbProxy.Restore)
	case faultDBReset:
		now := time.Now()
		s.dbProxy.Reset()
		r.ev.add(event{Kind: f.kind, Slot: s.name, Owner: owner, Start: now, End: time.Now()})
	case faultSinkReset:
		now := time.Now()
		s.sinkProxy.Reset()
		r.ev.add(event{Kind: f.kind, Slot: s.name, Owner: owner, Start: now, End: time.Now()})
	case faultSinkCut:
		interval(f.kind, "", f.dur, s.sinkProxy.Cut, s.sinkProxy.Restore)
	case faultSinkBlackHole:
		interval(f.kind, "", f.dur, s.sinkProxy.BlackHole, s.sinkProxy.Restore)
	case faultTerminate:
		var owners []string
		e := event{Kind: f.kind, Start: time.Now()}
		if f.allSlots {
			for _, s := range slots {
				if p := s.current(); p != nil {
					owners = append(owners, p.owner)
				}
			}
			e.Detail = "all workers"
		} else {
			owners = []string{owner}
			e.Slot, e.Owner = s.name, owner
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var n int
		err := r.env.admin.QueryRow(tctx,
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ANY($1)`, owners).Scan(&n)
		cancel()
		e.End = time.Now()
		e.Detail += fmt.Sprintf(" (%d sessions, err=%v)", n, err)
		r.ev.add(e)
	case faultFailover:
		if !r.pgRestartMu.TryLock() {
			return
		}
		r.faultWG.Add(1)
		go func() {
			defer r.faultWG.Done()
			defer r.pgRestartMu.Unlock()
			i := r.ev.add(event{Kind: f.kind, Start: time.Now(), Detail: "standby (synchronous), kill the primary, promote"})
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
			detail, err := r.env.failover(fctx)
			cancel()
			if err != nil {
				r.t.Errorf("failing over: %v", err)
			}
			r.ev.endWith(i, time.Now(), detail)
		}()
	case faultPGRestart:
		if !r.pgRestartMu.TryLock() {
			return
		}
		r.faultWG.Add(1)
		go func() {
			defer r.faultWG.Done()
			defer r.pgRestartMu.Unlock()
			i := r.ev.add(event{Kind: f.kind, Start: time.Now(), Detail: "pg_ctl restart -m immediate"})
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
			err := r.env.db().Restart(rctx, "immediate")
			cancel()
			if err != nil {
				r.t.Errorf("restarting PostgreSQL: %v", err)
			}
			r.ev.end(i, time.Now())
		}()
	case faultSink5xx:
		sinkFault(func(sf *sinkFaults, p float64) { sf.p5xx = p })
	case faultSink429:
		sinkFault(func(sf *sinkFaults, p float64) { sf.p429 = p })
	case faultSink425:
		sinkFault(func(sf *sinkFaults, p float64) { sf.p425 = p })
	case faultSinkHang:
		sinkFault(func(sf *sinkFaults, p float64) { sf.pHang = p * 0.5 })
	case faultSinkDrop:
		sinkFault(func(sf *sinkFaults, p float64) { sf.pDrop = p * 0.5 })
	case faultSinkBadText:
		sinkFault(func(sf *sinkFaults, p float64) { sf.pBadText = p })
	case faultSinkReject:
		sinkFault(func(sf *sinkFaults, p float64) { sf.pReject = p * 0.2 })
	case faultSinkAuth:
		if r.nats != nil {
			r.natsAuthWindow(ctx, f, s)
		} else {
			r.authWindow(ctx, f, s)
		}
	case faultMigrate:
		r.migrateAgain(ctx, f, s)
	case faultOperatorPause:
		r.operatorPause(ctx, f)
	case faultHeldProducer:
		if !r.heldBusy.CompareAndSwap(false, true) {
			return
		}
		g := r.groups[f.slot%len(r.groups)]
		r.faultWG.Add(1)
		go func() {
			defer r.faultWG.Done()
			defer r.heldBusy.Store(false)
			i := r.ev.add(event{Kind: faultHeldProducer, Start: time.Now(),
				Detail: fmt.Sprintf("%s: a producer transaction held open %s before its commit", g.name, f.dur)})
			defer func() { r.ev.end(i, time.Now()) }()
			g.held.hold = f.dur
			hctx, cancel := context.WithTimeout(ctx, f.dur+10*time.Second)
			defer cancel()
			agg := g.held.aggs[g.held.rng.IntN(len(g.held.aggs))]
			_ = g.held.write(hctx, agg, 1+g.held.rng.IntN(3), false) // its ledger records the outcome
		}()
	case faultIdleTx:
		if !r.idleTxBusy.CompareAndSwap(false, true) {
			return
		}
		r.faultWG.Add(1)
		go func() {
			defer r.faultWG.Done()
			defer r.idleTxBusy.Store(false)
			r.pinXmin(ctx, f.dur)
		}()
	}
}

// pinXmin holds a REPEATABLE READ transaction open and idle for d, so
// vacuum cannot remove any row version the workers leave behind meanwhile.
func (r *run) pinXmin(ctx context.Context, d time.Duration) {
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.idleCancel.Store(&cancel)
	defer r.idleCancel.Store(nil)
	i := r.ev.add(event{Kind: faultIdleTx, Start: time.Now(), Detail: "REPEATABLE READ snapshot held " + d.String()})
	defer func() { r.ev.end(i, time.Now()) }()
	conn, err := r.env.admin.Acquire(ictx)
	if err != nil {
		return
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ictx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return
	}
	defer tx.Rollback(context.WithoutCancel(ictx)) //nolint:errcheck // read-only
	var n int
	_ = tx.QueryRow(ictx, "SELECT count(*) FROM "+r.groups[0].table).Scan(&n)
	sleepCtx(ictx, d)
}

// terminate sends SIGTERM (a graceful shutdown mid-batch) and kills the
// process if it has not exited after grace; the supervisor restarts it.
func (r *run) terminate(s *slot, p *proc, grace time.Duration) {
	p.mu.Lock()
	p.terminated = true
	p.mu.Unlock()
	r.ev.add(event{Kind: faultSigterm, Slot: s.name, Owner: p.owner, Start: time.Now(), End: time.Now()})
	_ = p.signal(syscall.SIGTERM)
	r.faultWG.Add(1)
	go func() {
		defer r.faultWG.Done()
		select {
		case <-p.exited:
		case <-time.After(grace):
			p.mu.Lock()
			p.killed = true
			p.mu.Unlock()
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
}
