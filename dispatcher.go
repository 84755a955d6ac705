package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/internal/store"
)

// Dispatcher relays outbox rows to a [Sink] under lease and fencing.
//
// One claim statement leases a batch of rows (status processing, a new
// lease_version as fencing token, attempts+1); workers publish them outside
// any transaction; one finalize statement per batch of outcomes writes each
// row's result, fenced on id, status, lease_version and owner, and learns per
// row whether the fence held. Any number of dispatchers, in any number of
// processes, may run against one table.
type Dispatcher struct {
	cfg   *Config
	pool  *pgxpool.Pool
	sink  Sink
	store *store.Store
	log   *slog.Logger

	hook      Hook
	wake      chan struct{} // a notification arrived (capacity 1)
	listening atomic.Bool
	// due is set by a notification saying messages were made due
	// earlier than the dispatcher knows; the fetcher's next claim clears
	// it (lease.Mode.Due).
	due atomic.Bool
	// dues are when the retries and defers this dispatcher wrote come
	// due, so that an idle fetcher backing off its polls still claims
	// each on time.
	dues *dueTimes
	// chains are the run's chains, when its mode chains an aggregate's
	// messages: a hung publish releases what waits behind it.
	chains atomic.Pointer[chains]
	// listener is the LISTEN connection it hears its table on:
	// Config.Listener, or one of its own.
	listener *Listener
	stats    counters
	breaker  breaker
	sizer    *claimSizer
	// flow keeps the destinations' limits (Config.Flow); nil without.
	flow *flowControl
	// pauses are the destinations an operator paused.
	pauses *pauseGate

	// clock is the engine's time (the wall clock when nil; tests set
	// their own).
	clock lease.Clock

	// runner runs the dispatcher between Start and Stop.
	runner service.Runner
}

// NewDispatcher returns a dispatcher that relays cfg.Table to sink using
// pool. cfg may be nil for all defaults. The caller keeps ownership of the
// sink and closes it after the dispatcher has stopped.
func NewDispatcher(pool *pgxpool.Pool, sink Sink, cfg *Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, errors.New("outbox: NewDispatcher needs a pool")
	}
	if sink == nil {
		return nil, errors.New("outbox: NewDispatcher needs a sink")
	}
	c := cfg.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("outbox: invalid config: %w", err)
	}
	st, err := store.New(c.Table)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	hook := c.Hook
	if hook == nil {
		hook = BaseHook{}
	}
	d := &Dispatcher{
		hook:  hook,
		cfg:   c,
		pool:  pool,
		sink:  sink,
		store: st,
		log:   c.Logger.With(slog.String("component", "dispatcher"), slog.String("owner", c.Owner)),
		wake:  make(chan struct{}, 1),
		sizer: newClaimSizer(c),
		dues:  newDueTimes(),
	}
	d.pauses = newPauseGate(c.Flow, func(ctx context.Context) ([]store.Pause, error) { return d.store.Pauses(ctx, d.pool) },
		c.PollInterval, d.log)
	if c.Flow != nil && (limited(c.Flow) || splitBreaker(c.Flow)) {
		d.flow = newFlowControl(c.Flow, store.OwnerText(c.Owner), c.PublishTimeout, c.LeaseMode == LeaseRows, time.Now, d.liveOwners)
		d.flow.split = splitBreaker(c.Flow)
	}
	d.listener = c.Listener
	if d.listener == nil {
		// A connection of its own, probed once whatever the runs.
		d.listener = newListener(pool, d.log, c.PollInterval)
	}
	return d, nil
}

// Config returns the dispatcher's effective configuration.
func (d *Dispatcher) Config() Config { return *d.cfg }

// Run relays messages until ctx is cancelled, then shuts down gracefully:
// it stops claiming, lets in-flight publishes finish and finalizes them,
// releases claimed rows it had not started (fenced, attempt refunded), and
// returns nil (as it does when ctx ends while it starts). It returns an
// error only if it cannot start (the table does
// not exist, or the role lacks a privilege it needs: [*PrivilegeError]);
// database errors while running are logged and retried, never fatal,
// because delivery must resume once the database does.
func (d *Dispatcher) Run(ctx context.Context) error { return d.run(ctx, false) }

// Drain is [Dispatcher.Run] that also returns, with nil, once no row is
// pending or processing (in ordered mode, rows blocked behind a dead head do
// not count, since only an operator can unblock them).
func (d *Dispatcher) Drain(ctx context.Context) error { return d.run(ctx, true) }

// Start runs the dispatcher in the background until [Dispatcher.Stop] or
// until ctx is cancelled. It fails at once if the table does not exist or
// the role lacks a privilege the dispatcher needs.
func (d *Dispatcher) Start(ctx context.Context) error {
	if running(d.runner.Done()) {
		return errors.New("outbox: dispatcher already started")
	}
	if _, err := d.resolve(ctx); err != nil {
		return err
	}
	err := d.runner.Start(ctx, func(ctx context.Context) error { return d.run(ctx, false) })
	if errors.Is(err, service.ErrRunning) {
		return errors.New("outbox: dispatcher already started")
	}
	return err
}

// Stop shuts a started dispatcher down gracefully and waits for it. It is
// safe to call more than once, and before Start.
func (d *Dispatcher) Stop() error { return d.runner.Stop() }

// running reports whether a service whose Done channel is done still runs.
func running(done <-chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// stoppedBeforeStart is nil for a start cut short by ctx's end (a SIGTERM
// while the catalogs were read): nothing was claimed, so it is a clean
// stop, not a failure; any other error is returned.
func stoppedBeforeStart(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the stop asked for, not a failure
	}
	return err
}

// resolve checks, before anything is claimed, that the connected role holds
// every privilege the dispatcher needs (a [*PrivilegeError] otherwise: a
// role without them would fail every claim, forever), then finds the table.
func (d *Dispatcher) resolve(ctx context.Context) (store.Table, error) {
	opts := &AccessOpts{NoNotify: d.cfg.DisableNotify, NoHistory: d.cfg.AttemptHistory < 0}
	tablePrivs, waiterPrivs := opts.Privileges()
	sa, err := d.store.Access(ctx, d.pool, tablePrivs, waiterPrivs, opts.companions(d.store.Table))
	if err != nil {
		return store.Table{}, fmt.Errorf("outbox: reading the catalogs: %w", err)
	}
	if err := accessOf(sa, d.store.Table.Name).Err(); err != nil {
		return store.Table{}, err
	}
	t, err := d.store.Resolve(ctx, d.pool)
	if err != nil {
		return store.Table{}, fmt.Errorf("outbox: %w", err)
	}
	return t, nil
}

func (d *Dispatcher) run(ctx context.Context, drain bool) error {
	table, err := d.resolve(ctx)
	if err != nil {
		return stoppedBeforeStart(ctx, err)
	}
	if d.store.Table.Schema == "" {
		// From here on every statement names the table's schema, so none
		// depends on what a pooled session's search_path finds first.
		d.store = d.store.Qualified(table.Schema)
	}
	channel := table.Channel()
	lc := d.cfg.leaseConfig()
	lc.Clock = d.clock
	leases := lease.NewRegistry(d.clock)
	mode, err := lease.New(ctx, d.store, d.pool, leases, lc, d.leaseCallbacks(), d.log)
	if err != nil {
		return stoppedBeforeStart(ctx, err)
	}
	var stopListener, stopKeeper func()
	stopBeater := startService(ctx, d.newBeater(leases).run)

	if !d.cfg.DisableNotify {
		stopListener = d.listener.subscribe(d, channel)
	}
	if keep := mode.Keeper(ctx); keep != nil {
		// The leases are kept through shutdown, while in-flight
		// publishes end.
		stopKeeper = startService(context.WithoutCancel(ctx), keep)
	}
	d.log.InfoContext(ctx, "dispatcher started", slog.String("table", channel),
		slog.Int("workers", d.cfg.Workers), slog.Int("batch_size", d.cfg.BatchSize),
		slog.Duration("lease", d.cfg.Lease), slog.Bool("ordered", d.cfg.Ordered),
		slog.String("lease_mode", string(d.cfg.LeaseMode)))
	d.relay(ctx, drain, mode, leases)
	stopService(stopBeater)
	stopService(stopKeeper)
	stopService(stopListener)
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := mode.Close(cleanup); err != nil {
		d.log.WarnContext(ctx, "could not give back the leases; they pass on when they run out", slog.Any("error", err))
	}
	if err := d.store.Unwait(cleanup, d.pool, d.cfg.Owner); err != nil {
		d.log.DebugContext(ctx, "could not clear waiter row", slog.Any("error", err))
	}
	d.log.InfoContext(ctx, "dispatcher stopped")
	return nil
}

// relay runs the stages until the fetcher stops (ctx done, or drained): the
// fetcher claims into claims, the workers publish and answer with verdicts,
// the completers write them. On the way out each stage finishes what it
// holds: queued claims are released, in-flight publishes end, every verdict
// is written.
func (d *Dispatcher) relay(ctx context.Context, drain bool, mode lease.Mode, leases *lease.Registry) {
	if d.flow != nil {
		d.flow.shards = nil
		if s, ok := mode.(interface{ Shares() (held, total int) }); ok {
			d.flow.shards = s.Shares
		}
		d.flow.starting()
	}
	size := d.cfg.window()
	capacity := newSlots(size)
	claims := make(chan *claimed, size)
	verdicts := make(chan verdict, size)

	var chained *chains
	if mode.Chained() {
		chained = newChains()
		d.chains.Store(chained)
		defer d.chains.Store(nil)
	}
	var workers sync.WaitGroup
	w := &worker{
		cfg: d.cfg.publishConfig(mode.RenewEvery()), breaker: &d.breaker, sizer: d.sizer, leases: leases,
		chains: chained, publish: d.publish, observe: d.observeMessage, classify: d.classify, flow: d.flow,
		pauses: d.pauses,
	}
	for range d.cfg.Workers {
		workers.Go(func() { w.run(ctx, claims, verdicts) })
	}
	var completers, recorder sync.WaitGroup
	history := d.newHistory()
	if history != nil {
		recorder.Go(history.run)
	}
	for range d.cfg.completers() {
		c := newCompleter(d, mode, capacity, leases, size)
		if b, ok := mode.(lease.Batched); ok {
			c = newBatchedCompleter(d, b, capacity, leases, size)
		}
		c.chains, c.history = chained, history
		completers.Go(func() { c.run(verdicts) })
	}

	f := &fetcher{
		engine: d.engine(), cfg: d.cfg.fetchConfig(), mode: mode, store: d.store, pool: d.pool, sizer: d.sizer, breaker: &d.breaker,
		wake: d.wake, listening: &d.listening, due: &d.due, dues: d.dues, pauses: d.pauses,
		drain: drain, slots: capacity, leases: leases, chains: chained, out: claims,
	}
	f.run(ctx)
	f.finish()
	close(claims)
	workers.Wait()
	close(verdicts)
	completers.Wait()
	if history != nil {
		close(history.queue)
		recorder.Wait()
	}
}

// engine is what every stage of a run reports to and reads the time from.
type engine struct {
	hook  Hook
	stats *counters
	log   *slog.Logger
	clock lease.Clock
}

func (d *Dispatcher) engine() engine {
	return engine{hook: d.hook, stats: &d.stats, log: d.log, clock: d.clock}
}

// leaseCallbacks maps what the lease modes report onto the dispatcher's
// counters and hook.
func (d *Dispatcher) leaseCallbacks() lease.Callbacks {
	return lease.Callbacks{
		Beat: func(b lease.Beat) {
			if !b.Idle {
				d.stats.heartbeats.Add(1)
			}
			d.hook.OnHeartbeat(HeartbeatEvent{Rows: b.Rows, LeaseLost: b.LeaseLost, Hung: b.Hung, Duration: b.Duration, Err: b.Err})
		},
		Hung: func(l store.Lease) {
			d.stats.hung.Add(1)
			if cs := d.chains.Load(); cs != nil && cs.hung(l.ID) {
				d.signal() // the fetcher hands the released messages over
			}
		},
		Buried: func(ctx context.Context, id, token int64, cause error) {
			d.stats.count(OutcomeDead)
			d.hook.OnSettle(SettleEvent{Message: d.buried(ctx, id, token), Outcome: OutcomeDead, Err: cause})
		},
		Taken: d.signal,
	}
}

// buried is a message a shard takeover wrote dead, as the hook sees every
// settled one: read back, or its id and token alone if the read fails.
func (d *Dispatcher) buried(ctx context.Context, id, token int64) *Message {
	m := &Message{ID: id, IDNamespace: d.cfg.IDNamespace, FencingToken: token}
	if det, err := d.store.Message(ctx, d.pool, id); err == nil {
		m.AggregateType, m.AggregateID, m.EventType = det.AggregateType, det.AggregateID, det.EventType
		m.Payload, m.CreatedAt, m.Attempt, m.Headers, m.UID = det.Payload, det.CreatedAt, det.Attempts, det.Headers, det.UID
	}
	return m
}

// publish calls the sink, turning a panic into an error.
func (d *Dispatcher) publish(ctx context.Context, msg *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			d.log.ErrorContext(ctx, "sink panicked; message goes dead",
				slog.Int64("outbox_id", msg.ID), slog.Int64("lease_version", msg.FencingToken),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = &panicError{value: p}
		}
	}()
	// Test builds only: a sink that hangs ignoring its context, or fails
	// with an error text of arbitrary bytes.
	if err := failpoint.Error("publish-hang"); err != nil {
		return err
	}
	if err := failpoint.Error("publish-error"); err != nil {
		return err
	}
	msg.dropped = msg.dropped[:0]
	err = d.sink.Publish(ctx, msg)
	if len(msg.dropped) > 0 && msg.Attempt <= 1 {
		d.log.WarnContext(ctx, "headers not sent: the sink cannot carry them or reserves their names",
			slog.Int64("outbox_id", msg.ID), slog.Any("headers", msg.DroppedHeaders()))
	}
	return err
}

type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }
