//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/pgcluster"
)

// env is what the runs of one test share: a throwaway PostgreSQL cluster
// and the outboxd binary built with failpoints.
type env struct {
	t     *testing.T
	bin   string
	admin *pgxpool.Pool // through harnessDB, never faulted

	mu   sync.Mutex
	runs []*run
	// cluster is the primary; a failover replaces it with its promoted
	// standby (clusters holds every one started, for the cleanup).
	cluster  *pgcluster.Cluster
	clusters []*pgcluster.Cluster
	// proxies are every link to the database (the harness's, each
	// worker's): a failover points them at the new primary.
	proxies   []*proxy
	harnessDB *proxy
}

// db is the current primary.
func (e *env) db() *pgcluster.Cluster {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cluster
}

// dbProxy is a link to the current primary that follows failovers.
func (e *env) dbProxy(name string) (*proxy, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := newProxy(name, "127.0.0.1:"+strconv.Itoa(e.cluster.Port))
	if err == nil {
		e.proxies = append(e.proxies, p)
	}
	return p, err
}

// failover starts a synchronous streaming standby of the primary, kills
// the primary, promotes the standby and points every link at it. No
// commit the primary acknowledged is lost (the standby confirmed it); a
// transaction in flight fails, uncertain if it was committing.
func (e *env) failover(ctx context.Context) (string, error) {
	old := e.db()
	start := time.Now()
	standby, err := old.StartStandby(ctx, &pgcluster.StandbyOptions{Synchronous: true})
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.clusters = append(e.clusters, standby)
	e.mu.Unlock()
	ready := time.Now()
	if err := old.Kill(); err != nil {
		return "", err
	}
	killed := time.Now()
	if err := standby.Promote(ctx); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.cluster = standby
	for _, p := range e.proxies {
		p.SetUpstream("127.0.0.1:" + strconv.Itoa(standby.Port))
	}
	e.mu.Unlock()
	_ = old.Stop(ctx) // the data directory of the dead primary
	return fmt.Sprintf("standby on port %d ready in %s; primary on port %d killed; promoted in %s",
		standby.Port, ready.Sub(start).Round(time.Millisecond), old.Port, time.Since(killed).Round(time.Millisecond)), nil
}

// interrupts runs the registered cleanups on SIGINT or SIGTERM, then
// exits: an interrupted soak must leave no PostgreSQL or outboxd behind
// (the test framework's cleanups do not run on a signal).
var interrupts struct {
	sync.Mutex
	next int
	fns  map[int]func()
	stop chan struct{}
}

func onInterrupt(f func()) (cancel func()) {
	interrupts.Lock()
	defer interrupts.Unlock()
	if len(interrupts.fns) == 0 {
		interrupts.fns = map[int]func(){}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		stop := make(chan struct{})
		interrupts.stop = stop
		go func() {
			select {
			case <-stop:
				signal.Stop(sigs)
			case sig := <-sigs:
				fmt.Fprintf(os.Stderr, "chaos: %v: killing every worker and stopping every cluster\n", sig)
				interrupts.Lock()
				for _, f := range interrupts.fns {
					f()
				}
				os.Exit(2)
			}
		}()
	}
	id := interrupts.next
	interrupts.next++
	interrupts.fns[id] = f
	return func() {
		interrupts.Lock()
		defer interrupts.Unlock()
		delete(interrupts.fns, id)
		if len(interrupts.fns) == 0 {
			close(interrupts.stop)
		}
	}
}

// emergency kills every process of every run and stops the cluster.
func (e *env) emergency() {
	e.mu.Lock()
	runs := append([]*run(nil), e.runs...)
	e.mu.Unlock()
	for _, r := range runs {
		for _, s := range r.allSlots() {
			if p := s.current(); p != nil && p.cmd.Process != nil {
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.mu.Lock()
	clusters := append([]*pgcluster.Cluster(nil), e.clusters...)
	e.mu.Unlock()
	for _, c := range clusters {
		_ = c.Stop(ctx)
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	bin := outboxdBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, &pgcluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("starting throwaway PostgreSQL: %v", err)
	}
	e := &env{t: t, cluster: c, clusters: []*pgcluster.Cluster{c}, bin: bin}
	t.Cleanup(func() {
		e.mu.Lock()
		clusters := append([]*pgcluster.Cluster(nil), e.clusters...)
		e.mu.Unlock()
		for _, c := range clusters {
			if err := c.Stop(context.Background()); err != nil {
				t.Logf("stopping cluster: %v", err)
			}
		}
	})
	if e.harnessDB, err = e.dbProxy("harness-db"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.harnessDB.Close)
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable&application_name=chaos-harness",
		c.User, e.harnessDB.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.admin = pool
	t.Cleanup(onInterrupt(e.emergency))
	return e
}

// runConfig describes one run: the worker groups and the timings.
type runConfig struct {
	name           string
	tier           string
	lease          time.Duration
	publishTimeout time.Duration
	restartDelay   time.Duration
	drainTimeout   time.Duration
	// sink is where workers deliver: the recording HTTP receiver ("") or
	// a stream on the shared nats-server (sinkNATS).
	sink   string
	groups []groupConfig
	// classes are the fault classes of faults_test.go's menu extension
	// (classes_test.go) the run draws from.
	classes classSet
	// allowReap: rows reaped after their last attempt are an expected
	// outcome (a scenario run with --max-attempts 1), not falsely dead.
	allowReap bool
	// pipelines runs the first slot of the first group through a config
	// file of pipelines, beside side tables (pipelines_test.go); not with
	// the broker sink.
	pipelines bool
	// leaseMode is the workers' --lease-mode: leaseRow (""), leaseShard,
	// whose tables get shardCount shards, or leaseCursor, whose tables get
	// snapshot cursors on those shards; each group keeps its order
	// (ordered or not), which means the same in every mode.
	leaseMode string
}

const (
	leaseRow    = "row"
	leaseShard  = "shard"
	leaseCursor = "cursor"
	shardCount  = 16
)

// sharded reports whether mode leases whole shards (shard leases, and
// snapshot cursors on them).
func sharded(mode string) bool { return mode == leaseShard || mode == leaseCursor }

const sinkNATS = "nats"

type groupConfig struct {
	name       string // also the table name
	ordered    bool
	slots      int
	aggregates int
	producers  int
	rollbackP  float64
	// slotArgs adds flags to a slot's command line.
	slotArgs func(slot int) []string
	// arm picks the failpoints of a slot's incarnation.
	arm func(slot, incarnation int) string
	// limited routes one event type of the group's slots (the pipeline's
	// aside) through a route with a rate, a burst and a concurrency, to
	// the same receiver: flow control's hand-backs under the faults.
	limited bool
}

type group struct {
	cfg       groupConfig
	name      string
	table     string // schema-qualified
	audit     string // schema-qualified audit table
	led       *ledger
	slots     []*slot
	producers []*producer
	// bare: migrated by its bare name under the migrator's search_path
	// (the search_path class); decoy is the schema of the decoy waiters.
	bare  bool
	decoy string
	// shardAcqs are the shard leases taken, in audit order (shard and
	// cursor modes), read before the check.
	shardAcqs []shardAcq
	// held writes the held_producer fault's transactions, one at a time.
	held *producer
	// status is where a row's status is read: the table, or under
	// snapshot cursors a view that derives it from the cursors and the
	// parked messages (the status column is not written there).
	status string
}

// run is one scenario against its own schema.
type run struct {
	t      *testing.T
	env    *env
	cfg    runConfig
	seed   uint64
	dir    string
	schema string
	rec    *recorder
	nats   *natsRecorder // the broker variant's stream; nil for HTTP
	ev     eventLog
	groups []*group
	// side and pipelineSlot: the side tables and the slot relaying them
	// with its group's table through pipelines; nil unless cfg.pipelines.
	side         *side
	pipelineSlot *slot
	// calm stops arming failpoints on new incarnations (the final drain).
	calm atomic.Bool

	superCtx    context.Context
	superCancel context.CancelFunc
	supervising bool

	prodCancel context.CancelFunc
	prodWG     sync.WaitGroup

	faultWG     sync.WaitGroup
	idleTxBusy  atomic.Bool
	heldBusy    atomic.Bool
	pgRestartMu sync.Mutex
	idleCancel  atomic.Pointer[context.CancelFunc]
	authBusy    atomic.Bool
	migrateBusy atomic.Bool
	pauseBusy   atomic.Bool
	migrations  atomic.Int64
	probes      map[string]probeResult
	authHeal    map[string]probeResult

	phaseStart, phaseEnd time.Time
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// outDir is where a run's report and logs go: $CHAOS_OUT if set, else
// the test's artifact directory (kept with go test -artifacts).
func outDir(t *testing.T, name string) string {
	t.Helper()
	base := os.Getenv("CHAOS_OUT")
	if base == "" {
		base = t.ArtifactDir()
	}
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newRun(t *testing.T, e *env, cfg runConfig, seed uint64) *run {
	t.Helper()
	r := &run{t: t, env: e, cfg: cfg, seed: seed, dir: outDir(t, cfg.name),
		schema: "c_" + nonIdent.ReplaceAllString(strings.ToLower(cfg.name), "_")}
	if r.cfg.restartDelay == 0 {
		r.cfg.restartDelay = 300 * time.Millisecond
	}
	if r.cfg.drainTimeout == 0 {
		r.cfg.drainTimeout = 90 * time.Second
	}
	rec, err := newRecorder(seed^0x5eed, cfg.publishTimeout+500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r.rec = rec
	t.Cleanup(rec.Close)
	rec.rejectGroups = map[string]bool{}
	for _, gc := range cfg.groups {
		rec.rejectGroups[gc.name] = !gc.ordered
	}
	bareDone := false
	ctx := context.Background()
	if _, err := e.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{r.schema}.Sanitize()+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	sinkAddr := rec.Addr()
	if cfg.sink == sinkNATS {
		var names []string
		for _, gc := range cfg.groups {
			names = append(names, gc.name)
		}
		r.nats = newNATSRecorder(t, cfg.name, names)
		sinkAddr = natsAddr()
	}
	for gi, gc := range cfg.groups {
		g := &group{cfg: gc, name: gc.name, table: r.schema + "." + gc.name,
			audit: r.schema + "." + gc.name + "_chaos_audit", led: newLedger()}
		g.bare = cfg.classes.has(classSearchPath) && !gc.ordered && !bareDone
		bareDone = bareDone || g.bare
		if err := r.migrateFirst(ctx, g); err != nil {
			t.Fatalf("migrate %s: %v", g.table, err)
		}
		if err := installAudit(ctx, e.admin, r.schema, gc.name); err != nil {
			t.Fatalf("audit trigger on %s: %v", g.table, err)
		}
		g.status = g.table
		if sharded(cfg.leaseMode) {
			if err := r.enableShards(ctx, g); err != nil {
				t.Fatalf("shards on %s: %v", g.table, err)
			}
		}
		if cfg.leaseMode == leaseCursor {
			if err := r.enableCursors(ctx, g); err != nil {
				t.Fatalf("snapshot cursors on %s: %v", g.table, err)
			}
		}
		aggs := make([]string, gc.aggregates)
		for i := range aggs {
			aggs[i] = fmt.Sprintf("%s-agg-%d", gc.name, i)
		}
		g.held = &producer{idx: heldProducer, pool: e.admin, table: g.table, ordered: gc.ordered,
			aggs: aggs, led: g.led, label: "a transaction held open",
			rng: rand.New(rand.NewPCG(seed, uint64(1000*gi+heldProducer)))}
		for i := range gc.producers {
			g.producers = append(g.producers, &producer{idx: i, pool: e.admin, table: g.table, ordered: gc.ordered,
				aggs: aggs, rollbackP: gc.rollbackP, led: g.led, label: "the harness's pool, default search_path",
				rng: rand.New(rand.NewPCG(seed, uint64(1000*gi+i)))})
		}
		if g.bare {
			if err := r.searchPathProducers(ctx, g, gi); err != nil {
				t.Fatalf("search_path producers of %s: %v", g.table, err)
			}
		}
		for i := range gc.slots {
			s := &slot{r: r, g: g, name: fmt.Sprintf("%s%d", gc.name, i), done: make(chan struct{})}
			if s.dbProxy, err = e.dbProxy(s.name + "-db"); err != nil {
				t.Fatal(err)
			}
			if s.sinkProxy, err = newProxy(s.name+"-sink", sinkAddr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.dbProxy.Close)
			t.Cleanup(s.sinkProxy.Close)
			if gc.slotArgs != nil {
				s.extraArgs = gc.slotArgs(i)
			}
			if gc.arm != nil {
				i := i
				s.arm = func(inc int) string { return gc.arm(i, inc) }
			}
			g.slots = append(g.slots, s)
		}
		r.groups = append(r.groups, g)
	}
	if cfg.pipelines && r.nats == nil {
		if r.side, err = newSide(ctx, r); err != nil {
			t.Fatalf("side tables: %v", err)
		}
		r.pipelineSlot = r.groups[0].slots[0]
		rec.namespaced = map[string]bool{r.pipelineSlot.name: true}
	}
	r.superCtx, r.superCancel = context.WithCancel(context.Background())
	e.mu.Lock()
	e.runs = append(e.runs, r)
	e.mu.Unlock()
	// Registered last, so it runs first: processes end before the proxies
	// and the cluster they talk to.
	t.Cleanup(r.killAll)
	t.Logf("run %s: seed %d, output %s", cfg.name, seed, r.dir)
	return r
}

// migrateFirst creates g's table, by its bare name under the run schema's
// search_path if g.bare.
func (r *run) migrateFirst(ctx context.Context, g *group) error {
	if g.bare {
		return r.migrateBare(ctx, g)
	}
	admin, err := outbox.NewAdmin(r.env.admin, g.table)
	if err != nil {
		return err
	}
	return admin.Migrate(ctx)
}

// startSlot starts supervising one slot.
func (r *run) startSlot(s *slot) {
	r.supervising = true
	go s.supervise(r.superCtx)
}

func (r *run) startAll() {
	for _, g := range r.groups {
		for _, s := range g.slots {
			if s.current() == nil {
				r.startSlot(s)
			}
		}
	}
}

// produce writes until every group's ledger holds n committed messages.
func (r *run) produce(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for _, g := range r.groups {
		for _, p := range g.producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.run(ctx, 0, n)
			}()
		}
	}
	wg.Wait()
}

// startProducers writes in the background every interval (per producer),
// up to n committed messages per group when n > 0.
func (r *run) startProducers(interval time.Duration, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	r.prodCancel = cancel
	for _, g := range r.groups {
		for _, p := range g.producers {
			r.prodWG.Add(1)
			go func() {
				defer r.prodWG.Done()
				p.run(ctx, interval, n)
			}()
		}
	}
	if r.side != nil && n == 0 {
		r.prodWG.Go(func() { r.side.produce(ctx, 2*interval) })
	}
}

func (r *run) stopProducers() {
	if r.prodCancel != nil {
		r.prodCancel()
	}
	r.prodWG.Wait()
}

func (r *run) allSlots() []*slot {
	var out []*slot
	for _, g := range r.groups {
		out = append(out, g.slots...)
	}
	return out
}

// heal ends every fault still in force.
func (r *run) heal() {
	if c := r.idleCancel.Load(); c != nil {
		(*c)()
	}
	r.faultWG.Wait()
	for _, s := range r.allSlots() {
		s.dbProxy.Restore()
		s.sinkProxy.Restore()
		if p := s.current(); p != nil {
			_ = p.signal(syscall.SIGCONT)
		}
	}
	r.rec.setFaults(sinkFaults{})
	if c := r.idleCancel.Load(); c != nil {
		(*c)()
	}
}

// undelivered counts rows not yet finished, not counting rows of an
// ordered group blocked behind a dead head (only an operator can unblock
// those).
func (r *run) undelivered(ctx context.Context, g *group) (int, error) {
	q := `SELECT count(*) FROM ` + g.status + ` AS o WHERE o.status IN ('pending', 'processing')`
	if g.cfg.ordered {
		q += ` AND NOT EXISTS (SELECT 1 FROM ` + g.status + ` AS p WHERE p.aggregate_id = o.aggregate_id AND p.id < o.id AND p.status = 'dead')`
	}
	var n int
	err := r.env.admin.QueryRow(ctx, q).Scan(&n)
	return n, err
}

// drain heals the system, stops the producers and waits, with workers
// running unarmed, until nothing is left to deliver or drainTimeout passes.
func (r *run) drain() time.Duration {
	start := time.Now()
	r.calm.Store(true)
	r.heal()
	r.stopProducers()
	r.startAll()
	deadline := time.Now().Add(r.cfg.drainTimeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		left := 0
		var err error
		for _, g := range r.groups {
			var n int
			n, err = r.undelivered(ctx, g)
			left += n
		}
		if r.side != nil && err == nil {
			var n int
			n, err = r.side.undelivered(ctx)
			left += n
		}
		cancel()
		if err == nil && left == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.cfg.classes.has(classOrderedRun) && r.nats == nil {
		// The probe needs the webhook's per-aggregate delay.
		r.probeOrdered()
	}
	if r.cfg.classes.has(classAuthHeal) {
		r.probeAuthHeal()
	}
	r.stopWorkers()
	return time.Since(start)
}

// stopWorkers shuts every process down gracefully and stops supervising.
func (r *run) stopWorkers() {
	if !r.supervising {
		return
	}
	r.superCancel()
	for _, s := range r.allSlots() {
		if s.current() != nil {
			<-s.done
		}
	}
	r.supervising = false
}

// killAll is the last-resort cleanup: no process of the run survives the test.
func (r *run) killAll() {
	r.superCancel()
	if c := r.idleCancel.Load(); c != nil {
		(*c)()
	}
	if r.prodCancel != nil {
		r.prodCancel()
	}
	for _, s := range r.allSlots() {
		if p := s.current(); p != nil && p.cmd.Process != nil && p.alive() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	for _, s := range r.allSlots() {
		if p := s.current(); p != nil {
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
			}
		}
		if s.current() != nil {
			select {
			case <-s.done:
			case <-time.After(20 * time.Second):
			}
		}
	}
	r.prodWG.Wait()
	r.faultWG.Wait()
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// hasEvent reports whether an event of kind for slot (any slot if empty)
// whose detail contains detail has been logged.
func (r *run) hasEvent(kind, slotName, detail string) bool {
	for _, e := range r.ev.snapshot() {
		if e.Kind == kind && (slotName == "" || e.Slot == slotName) && strings.Contains(e.Detail, detail) {
			return true
		}
	}
	return false
}

// finish drains, checks and writes the report; it fails the test if a
// must-be-zero counter is not zero.
func (r *run) finish() *report {
	t := r.t
	if r.phaseEnd.IsZero() {
		r.phaseEnd = time.Now()
	}
	drainTook := r.drain()
	rep, err := r.check(drainTook)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	if r.side != nil {
		dels, _, _ := r.deliveries()
		lost, rows, examples, err := r.side.check(context.Background(), dels)
		if err != nil {
			t.Fatalf("checking the side tables: %v", err)
		}
		rep.SideLost, rep.SideRows = lost, rows
		for _, e := range examples {
			rep.example("pipeline_side_lost", "%s", e)
		}
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	path := filepath.Join(r.dir, "report.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	evs, _ := json.MarshalIndent(r.ev.snapshot(), "", "  ")
	_ = os.WriteFile(filepath.Join(r.dir, "events.json"), evs, 0o644)
	dels, _, _ := r.deliveries()
	if f, err := os.Create(filepath.Join(r.dir, "deliveries.jsonl")); err == nil {
		enc := json.NewEncoder(f)
		for _, d := range dels {
			_ = enc.Encode(d)
		}
		f.Close()
	}
	fmt.Printf("chaos: %s report: %s\n", r.cfg.name, path)
	t.Logf("report %s", path)
	if bad := rep.failures(); len(bad) > 0 {
		t.Errorf("run %s (CHAOS_SEED=%d): must-be-zero counters are not zero: %s\n%s", r.cfg.name, r.seed, strings.Join(bad, ", "), b)
	} else {
		t.Logf("run %s: committed=%d delivered_unique=%d deliveries=%d duplicates=%d fenced=%d",
			r.cfg.name, rep.Committed, rep.DeliveredUnique, rep.Deliveries, rep.Duplicates, rep.FencedFinalizes)
	}
	return rep
}

// deliveries returns what the run's sink received: the HTTP receiver's
// log, or every message of the broker variant's stream.
func (r *run) deliveries() ([]delivery, map[string]int, error) {
	if r.nats != nil {
		dels, err := r.nats.snapshot()
		return dels, map[string]int{}, err
	}
	dels, refused := r.rec.snapshot()
	return dels, refused, nil
}

// installAudit adds the test-only audit trail (<table>_chaos_audit: the
// name <table>_audit is migrate's operator log): every change of status or
// lease_version (claims, finalizes, reaps) with the row before and after,
// the writer's application_name (each worker incarnation connects as its
// owner name) and the times the statement saw.
func installAudit(ctx context.Context, db *pgxpool.Pool, schema, table string) error {
	s := pgx.Identifier{schema}.Sanitize()
	t := s + "." + pgx.Identifier{table}.Sanitize()
	a := s + "." + pgx.Identifier{table + "_chaos_audit"}.Sanitize()
	fn := s + "." + pgx.Identifier{table + "_chaos_audit_fn"}.Sanitize()
	q := `
CREATE TABLE ` + a + ` (
    seq             bigserial PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    xact_now        timestamptz NOT NULL DEFAULT now(),
    app             text NOT NULL DEFAULT current_setting('application_name'),
    id              bigint NOT NULL,
    old_status      text NOT NULL,
    new_status      text NOT NULL,
    old_version     bigint NOT NULL,
    new_version     bigint NOT NULL,
    old_owner       text,
    new_owner       text,
    old_attempts    integer NOT NULL,
    new_attempts    integer NOT NULL,
    old_lease_until timestamptz,
    last_error      text
);
CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $chaos$
BEGIN
    INSERT INTO ` + a + ` (id, old_status, new_status, old_version, new_version, old_owner, new_owner,
                           old_attempts, new_attempts, old_lease_until, last_error)
    VALUES (NEW.id, OLD.status, NEW.status, OLD.lease_version, NEW.lease_version, OLD.lease_owner,
            NEW.lease_owner, OLD.attempts, NEW.attempts, OLD.lease_until, NEW.last_error);
    RETURN NULL;
END
$chaos$;
CREATE TRIGGER chaos_audit AFTER UPDATE ON ` + t + ` FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease_version IS DISTINCT FROM NEW.lease_version)
    EXECUTE FUNCTION ` + fn + `();`
	_, err := db.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
	return err
}
