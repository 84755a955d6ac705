//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
)

// natsAuthWindow makes the broker refuse the credentials of every worker
// (or of one slot) for f.dur: their connections are reset and every
// reconnect meets "Authorization Violation", until the rotation is
// undone. One event per slot, since each link is its own.
func (r *run) natsAuthWindow(ctx context.Context, f planned, s *slot) {
	if !r.authBusy.CompareAndSwap(false, true) {
		return
	}
	slots := []*slot{s}
	if f.allSlots {
		slots = r.allSlots()
	}
	r.faultWG.Add(1)
	go func() {
		defer r.faultWG.Done()
		defer r.authBusy.Store(false)
		var evs []int
		for _, s := range slots {
			owner := ""
			if p := s.current(); p != nil {
				owner = p.owner
			}
			evs = append(evs, r.ev.add(event{Kind: faultSinkAuth, Slot: s.name, Owner: owner, Start: time.Now(),
				Detail: "NATS Authorization Violation"}))
			s.sinkProxy.RefuseAuth()
		}
		sleepCtx(ctx, f.dur)
		for i, s := range slots {
			s.sinkProxy.Restore()
			r.ev.end(evs[i], time.Now())
		}
	}()
}

// authWindow answers every request of every worker (or of one slot) 401 or
// 403 for f.dur: a credential rotated, then restored.
func (r *run) authWindow(ctx context.Context, f planned, s *slot) {
	if !r.authBusy.CompareAndSwap(false, true) {
		return
	}
	slotName, detail := "", fmt.Sprintf("HTTP %d to every worker", f.code)
	if !f.allSlots {
		slotName, detail = s.name, fmt.Sprintf("HTTP %d to %s", f.code, s.name)
	}
	r.faultWG.Add(1)
	go func() {
		defer r.faultWG.Done()
		defer r.authBusy.Store(false)
		i := r.ev.add(event{Kind: faultSinkAuth, Slot: slotName, Start: time.Now(), Detail: detail})
		r.rec.updateFaults(func(sf *sinkFaults) { sf.authCode, sf.authSlot = f.code, slotName })
		sleepCtx(ctx, f.dur)
		r.rec.updateFaults(func(sf *sinkFaults) { sf.authCode, sf.authSlot = 0, "" })
		r.ev.end(i, time.Now())
	}()
}

// migrateAgain re-runs `outboxd migrate` on the slot's table (or on every
// table), as a deploy's init step does, while everything else is busy.
func (r *run) migrateAgain(ctx context.Context, f planned, s *slot) {
	if !r.migrateBusy.CompareAndSwap(false, true) {
		return
	}
	groups := []*group{s.g}
	if f.allSlots {
		groups = r.groups
	}
	r.faultWG.Add(1)
	go func() {
		defer r.faultWG.Done()
		defer r.migrateBusy.Store(false)
		for _, g := range groups {
			r.migrate(ctx, g)
		}
	}()
}

// migrateDetailOK starts the detail of a migrate event that exited 0.
const migrateDetailOK = "exit 0"

func (r *run) migrate(ctx context.Context, g *group) {
	n := r.migrations.Add(1)
	table, dsn := g.table, r.directDSN("chaos-migrate", "")
	if g.bare {
		table, dsn = g.name, r.directDSN("chaos-migrate", r.schema)
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, r.env.bin, "migrate", "--dsn", dsn, "--table", table)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	i := r.ev.add(event{Kind: faultMigrate, Start: start, Detail: "outboxd migrate --table " + table})
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Millisecond)
	_ = os.WriteFile(filepath.Join(r.dir, "logs", fmt.Sprintf("migrate-%d.log", n)), out, 0o644)
	detail := fmt.Sprintf("%s in %v: outboxd migrate --table %s", migrateDetailOK, took, table)
	if err != nil {
		detail = fmt.Sprintf("failed in %v (%v): outboxd migrate --table %s: %s", took, err, table,
			truncateStr(strings.TrimSpace(string(out)), 300))
	}
	r.ev.endWith(i, time.Now(), detail)
}

// directDSN reaches the cluster without a proxy, with searchPath as the
// session's search_path when set.
func (r *run) directDSN(app, searchPath string) string {
	dsn := r.env.db().DSN + "&connect_timeout=5&application_name=" + app
	if searchPath != "" {
		dsn += "&search_path=" + searchPath
	}
	return dsn
}

// migrateBare migrates g by its bare name under a search_path naming only
// the run's schema, as a user who never qualifies the table does.
func (r *run) migrateBare(ctx context.Context, g *group) error {
	if _, err := r.env.admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{r.schema}.Sanitize()); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, r.directDSN("chaos-migrate", r.schema))
	if err != nil {
		return err
	}
	defer pool.Close()
	admin, err := outbox.NewAdmin(pool, g.name)
	if err != nil {
		return err
	}
	return admin.Migrate(ctx)
}

// searchPathProducers adds two producers to g whose sessions use another
// search_path than the migrator's: one without the table's schema, one
// with a decoy schema first that holds a relation named like the table's
// waiters, which counts every read (a sequence, since a read may be rolled
// back with its transaction).
func (r *run) searchPathProducers(ctx context.Context, g *group, gi int) error {
	decoy := r.schema + "_decoy"
	d := pgx.Identifier{decoy}.Sanitize()
	q := `DROP SCHEMA IF EXISTS ` + d + ` CASCADE;
CREATE SCHEMA ` + d + `;
CREATE SEQUENCE ` + d + `.reads;
CREATE FUNCTION ` + d + `.waiters_read() RETURNS TABLE (owner text, wait_until timestamptz)
    LANGUAGE plpgsql AS $chaos$ BEGIN PERFORM nextval('` + decoy + `.reads'); END $chaos$;
CREATE VIEW ` + d + `.` + pgx.Identifier{g.name + "_waiters"}.Sanitize() + ` AS SELECT * FROM ` + d + `.waiters_read();`
	if _, err := r.env.admin.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
		return err
	}
	g.decoy = decoy
	for k, path := range []string{"public", d + ", public"} {
		cfg, err := pgxpool.ParseConfig(r.directDSN(fmt.Sprintf("chaos-producer-sp%d", k), ""))
		if err != nil {
			return err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = path
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		r.t.Cleanup(pool.Close)
		base := g.producers[0]
		i := len(g.producers)
		g.producers = append(g.producers, &producer{idx: i, pool: pool, table: g.table, aggs: base.aggs,
			rollbackP: base.rollbackP, led: g.led, label: "search_path=" + path,
			rng: rand.New(rand.NewPCG(r.seed, uint64(1000*gi+i)))})
	}
	return nil
}

// decoyReads is how often a producer's trigger read the decoy waiters
// relation instead of the table's own.
func (r *run) decoyReads(ctx context.Context, g *group) (int64, error) {
	if g.decoy == "" {
		return 0, nil
	}
	var n int64
	err := r.env.admin.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM `+
		pgx.Identifier{g.decoy, "reads"}.Sanitize()).Scan(&n)
	return n, err
}

// Ordered-run probe: after the drain, with every worker idle under `run`,
// one transaction commits a burst on a fresh aggregate, whose every
// delivery the sink holds probeDelay; each message can only be claimed
// once the one before is finalized, so the burst drains fast only if a
// finalize that frees a head wakes the fetcher instead of leaving it to
// the next poll (orderedPollInterval).
const (
	orderedPollInterval = 4 * time.Second
	probeMessages       = 10
	probeDelay          = 100 * time.Millisecond
	probeLimit          = 5 * time.Second
)

type probeResult struct {
	Messages     int     `json:"messages"`
	Seconds      float64 `json:"seconds"`
	LimitSeconds float64 `json:"limit_seconds"`
	PollSeconds  float64 `json:"poll_interval_seconds"`
	Tries        int     `json:"tries"`
}

// probeOrdered times the burst on each ordered group; a try during which
// a worker died or an armed failpoint fired is repeated, at most three
// times.
func (r *run) probeOrdered() {
	for _, g := range r.groups {
		if !g.cfg.ordered {
			continue
		}
		res := probeResult{Messages: probeMessages, LimitSeconds: probeLimit.Seconds(), PollSeconds: orderedPollInterval.Seconds()}
		for res.Tries < 3 {
			res.Tries++
			before, fired := len(r.ev.snapshot()), countInLogs(r.dir, "failpoint ")
			took, err := r.probeOnce(g, res.Tries)
			if err != nil {
				r.t.Errorf("ordered probe on %s: %v", g.name, err)
				break
			}
			res.Seconds = took.Seconds()
			// A failpoint still armed on a live incarnation (a hang, an
			// injected error and its backoff) disturbs the timing too.
			if !r.workerDiedSince(before) && countInLogs(r.dir, "failpoint ") == fired {
				break
			}
		}
		if r.probes == nil {
			r.probes = map[string]probeResult{}
		}
		r.probes[g.name] = res
	}
}

func (r *run) probeOnce(g *group, try int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	agg := fmt.Sprintf("%s-probe-%d", g.name, try)
	r.rec.setFaults(sinkFaults{delay: probeDelay, delayAgg: agg})
	defer r.rec.setFaults(sinkFaults{})
	start := time.Now()
	if err := g.producers[0].write(ctx, agg, probeMessages, false); err != nil {
		return 0, err
	}
	for ctx.Err() == nil {
		var done int
		if err := r.env.admin.QueryRow(ctx, `SELECT count(*) FROM `+g.status+` WHERE aggregate_id = $1 AND status = 'done'`,
			agg).Scan(&done); err != nil {
			return 0, err
		}
		if done >= probeMessages {
			return time.Since(start), nil
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return time.Since(start), nil // not all done within a minute: certainly late
}

// workerDiedSince reports whether a worker was killed or crashed after the
// first n events.
func (r *run) workerDiedSince(n int) bool {
	evs := r.ev.snapshot()
	for _, e := range evs[min(n, len(evs)):] {
		if e.Kind == "kill" || e.Kind == "crash" {
			return true
		}
	}
	return false
}

// classArm draws the failpoints of the enabled failpoint classes for one
// incarnation: error_text on any worker, publish_hang on those with
// heartbeats (a hung publish there keeps its lease alive). alone says the
// incarnation must not also be armed to crash: a publish hung for good is
// only a test while its process lives on.
func classArm(c classSet, s uint64, slot, inc int, heartbeat bool, lease time.Duration) (fps []string, alone bool) {
	rng := rand.New(rand.NewPCG(s^0xc1a55e5, uint64(slot)<<32|uint64(inc)))
	if c.has(classErrorText) && rng.Float64() < 0.6 {
		fps = append(fps, fmt.Sprintf("publish-error=error%%%.3f", 0.01+0.04*rng.Float64()))
	}
	if !c.has(classPublishHang) || !heartbeat || inc == 0 || (inc > 1 && rng.Float64() < 0.5) {
		return fps, false
	}
	// A second incarnation always hangs for good once; later ones either
	// way.
	if inc > 1 && rng.IntN(2) == 0 {
		d := lease + time.Duration(500+rng.IntN(4000))*time.Millisecond
		return append(fps, fmt.Sprintf("publish-hang=hang%%0.02:%v", d)), false
	}
	return append(fps, fmt.Sprintf("publish-hang=hang@%d:0s", 5+rng.IntN(100))), true
}

// Credential-heal probe (class auth_heal): after the drain, with every
// worker idle, the sink refuses every worker's credential (HTTP 401, or
// the NATS broker's Authorization Violation), a batch is written and
// refused until every worker has paused, then the credential is restored:
// the batch must be delivered within authHealLimit (the batch's rows are
// those past the table's highest id before it: the producers are stopped). A refused message
// parked past the paused sink's probe leaves a healed sink idle with
// nothing to probe with (it waited 30 s).
const (
	authHealMessages = 20
	authHealRefusing = 2500 * time.Millisecond // the refusal, once the batch is written
	authHealLimit    = 10 * time.Second
)

func (r *run) probeAuthHeal() {
	var g *group
	for _, c := range r.groups {
		if !c.cfg.ordered {
			g = c
			break
		}
	}
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res := probeResult{Messages: authHealMessages, LimitSeconds: authHealLimit.Seconds(), Tries: 1}
	var before int64
	if err := r.env.admin.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM `+g.table).Scan(&before); err != nil {
		r.t.Errorf("auth_heal probe on %s: %v", g.name, err)
		return
	}
	refuse, restore := r.refuseEveryone()
	i := r.ev.add(event{Kind: faultSinkAuth, Start: time.Now(), Detail: "auth_heal probe: every worker refused"})
	refuse()
	// The producers are stopped: the batch is every row past before.
	err := g.producers[0].write(ctx, g.name+"-auth-heal", authHealMessages, false)
	if err == nil {
		sleepCtx(ctx, authHealRefusing)
	}
	restore()
	r.ev.end(i, time.Now())
	if err != nil {
		r.t.Errorf("auth_heal probe on %s: %v", g.name, err)
		return
	}
	start := time.Now()
	for ctx.Err() == nil {
		var done int
		if err := r.env.admin.QueryRow(ctx, `SELECT count(*) FROM `+g.status+` WHERE id > $1 AND status = 'done'`,
			before).Scan(&done); err != nil {
			r.t.Errorf("auth_heal probe on %s: %v", g.name, err)
			return
		}
		if done >= authHealMessages {
			break
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	res.Seconds = time.Since(start).Seconds()
	r.authHeal = map[string]probeResult{g.name: res}
}

// refuseEveryone returns how to make the sink refuse every worker's
// credential and how to restore it.
func (r *run) refuseEveryone() (refuse, restore func()) {
	if r.nats != nil {
		return func() {
				for _, s := range r.allSlots() {
					s.sinkProxy.RefuseAuth()
				}
			}, func() {
				for _, s := range r.allSlots() {
					s.sinkProxy.Restore()
				}
			}
	}
	return func() { r.rec.updateFaults(func(sf *sinkFaults) { sf.authCode, sf.authSlot = 401, "" }) },
		func() { r.rec.updateFaults(func(sf *sinkFaults) { sf.authCode, sf.authSlot = 0, "" }) }
}

// operatorPause pauses a group's limited route (or, one time in three and
// for a group without one, its whole table) with `outboxd pause` for
// f.dur, then resumes it with `outboxd resume`: the held messages must be
// delivered once, in order where the group is ordered, with no attempt
// spent. The resume is retried (PostgreSQL may be restarting) and runs
// even as the phase ends: the calm phase must deliver the backlog.
func (r *run) operatorPause(ctx context.Context, f planned) {
	if !r.pauseBusy.CompareAndSwap(false, true) {
		return
	}
	g := r.groups[f.slot%len(r.groups)]
	table, dsn := g.table, r.directDSN("chaos-pause", "")
	if g.bare {
		table, dsn = g.name, r.directDSN("chaos-pause", r.schema)
	}
	args := []string{"--dsn", dsn, "--table", table}
	what := "the whole table"
	if g.cfg.limited && !f.allSlots {
		args, what = append(args, "--route", "limited"), `route "limited"`
	}
	r.faultWG.Add(1)
	go func() {
		defer r.faultWG.Done()
		defer r.pauseBusy.Store(false)
		i := r.ev.add(event{Kind: faultOperatorPause, Start: time.Now(), Detail: g.name + ": " + what})
		outboxd := func(cmd string) (string, error) {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			c := exec.CommandContext(cctx, r.env.bin, append([]string{cmd}, args...)...)
			c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := c.CombinedOutput()
			return strings.TrimSpace(string(out)), err
		}
		paused, err := outboxd("pause")
		detail := g.name + ": " + paused
		if err == nil {
			sleepCtx(ctx, f.dur)
		}
		for try := 0; ; try++ {
			out, rerr := outboxd("resume")
			if rerr == nil || strings.Contains(out, "is not paused") {
				detail += "; " + out
				break
			}
			if try == 60 {
				r.t.Errorf("operator pause of %s: resume failed: %v: %s", g.name, rerr, out)
				break
			}
			time.Sleep(time.Second)
		}
		r.ev.endWith(i, time.Now(), truncateStr(detail, 300))
	}()
}
