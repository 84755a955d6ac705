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
	freed     chan struct{} // the completer finalized rows (capacity 1)
	listening atomic.Bool
	// probed is set once the listener sent its notification probe;
	// probeTo, when set (tests), is the channel the probe goes to instead
	// of the listened one.
	probed  atomic.Bool
	probeTo string
	stats   counters
	breaker breaker
	sizer   *claimSizer

	// flights are the rows whose publish has started and that are not yet
	// finalized, for heartbeats; only kept when heartbeats are on. Keyed by
	// lease, not row: a dispatcher that lost a lease may claim the row
	// again before the old lease's publish has ended, and settling the old
	// one must not drop the new.
	flightsMu sync.Mutex
	flights   map[store.Lease]*job

	mu      sync.Mutex
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
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
	return &Dispatcher{
		hook:    hook,
		flights: map[store.Lease]*job{},
		cfg:     c,
		pool:    pool,
		sink:    sink,
		store:   st,
		log:     c.Logger.With(slog.String("component", "dispatcher"), slog.String("owner", c.Owner)),
		wake:    make(chan struct{}, 1),
		freed:   make(chan struct{}, 1),
		sizer:   newClaimSizer(c),
	}, nil
}

// Config returns the dispatcher's effective configuration.
func (d *Dispatcher) Config() Config { return *d.cfg }

// Run relays messages until ctx is cancelled, then shuts down gracefully:
// it stops claiming, lets in-flight publishes finish and finalizes them,
// releases claimed rows it had not started (fenced, attempt refunded), and
// returns nil. It returns an error only if it cannot start (the table does
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
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		select {
		case <-d.done: // stopped on its own (its context ended): start afresh
		default:
			return errors.New("outbox: dispatcher already started")
		}
	}
	if _, err := d.resolve(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	d.running, d.cancel, d.done, d.runErr = true, cancel, make(chan struct{}), nil
	go func() {
		err := d.run(runCtx, false)
		d.mu.Lock()
		d.runErr = err
		d.mu.Unlock()
		close(d.done)
	}()
	return nil
}

// Stop shuts a started dispatcher down gracefully and waits for it. It is
// safe to call more than once, and before Start.
func (d *Dispatcher) Stop() error {
	d.mu.Lock()
	if !d.running {
		d.mu.Unlock()
		return nil
	}
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	cancel()
	<-done
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running = false
	return d.runErr
}

// job is one claimed row on its way through a worker.
type job struct {
	msg Message
	// deadline (unix nanoseconds) is when this worker stops trusting its
	// lease: the lease measured from before the claim (or the heartbeat
	// that last extended it) was sent, less a tenth for safety, so local
	// timing can only err on the early side of the database's clock.
	deadline atomic.Int64
	// dbNow is the database's now() at claim time; claimedAt the local
	// monotonic time then. Together they date an outcome on the database's
	// clock.
	dbNow     time.Time
	claimedAt time.Time
	// publishDur is how long Publish took (set by the worker).
	publishDur time.Duration
	// cancel ends the publish when a heartbeat finds the lease lost
	// (guarded by Dispatcher.flightsMu).
	cancel context.CancelCauseFunc
	// phase is where the job is (queued, publishing, published); started
	// when its publish began (unix nanoseconds), for heartbeats.
	phase   atomic.Int32
	started atomic.Int64
	// hung is set once a heartbeat found the publish running past
	// PublishTimeout plus a grace, and stopped extending its lease.
	hung atomic.Bool
}

// Phases of a job.
const (
	phaseQueued int32 = iota
	phasePublishing
	phasePublished
)

func (j *job) setDeadline(t time.Time) { j.deadline.Store(t.UnixNano()) }

// dbTime is the database's clock now, as estimated from the claim.
func (j *job) dbTime() time.Time  { return j.dbNow.Add(time.Since(j.claimedAt)) }
func (j *job) lease() store.Lease { return store.Lease{ID: j.msg.ID, Version: j.msg.FencingToken} }
func (j *job) untilDeadline() time.Duration {
	return time.Until(time.Unix(0, j.deadline.Load()))
}

type result struct {
	job     *job
	outcome store.RowWrite
	kind    outcomeKind
	err     error
}

// resolve checks, before anything is claimed, that the connected role holds
// every privilege the dispatcher needs (a [*PrivilegeError] otherwise: a
// role without them would fail every claim, forever), then finds the table.
func (d *Dispatcher) resolve(ctx context.Context) (store.Table, error) {
	tablePrivs, waiterPrivs := (&AccessOpts{NoNotify: d.cfg.DisableNotify}).Privileges()
	sa, err := d.store.Access(ctx, d.pool, tablePrivs, waiterPrivs)
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
		return err
	}
	if d.store.Table.Schema == "" {
		// From here on every statement names the table's schema, so none
		// depends on what a pooled session's search_path finds first.
		d.store = d.store.Qualified(table.Schema)
	}
	channel := table.Channel()
	limit := 2*d.cfg.BatchSize + d.cfg.Workers
	jobs := make(chan *job, limit)
	results := make(chan result, limit)
	var inflight atomic.Int64

	var listenWG sync.WaitGroup
	listenCtx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	if !d.cfg.DisableNotify {
		listenWG.Add(1)
		go func() {
			defer listenWG.Done()
			d.listen(listenCtx, channel)
		}()
	}

	var beatWG sync.WaitGroup
	beatCtx, stopBeating := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBeating()
	if d.cfg.HeartbeatInterval > 0 {
		beatWG.Add(1)
		go func() {
			defer beatWG.Done()
			d.heartbeat(beatCtx)
		}()
	}

	var workWG sync.WaitGroup
	for range d.cfg.Workers {
		workWG.Add(1)
		go func() {
			defer workWG.Done()
			d.work(ctx, jobs, results)
		}()
	}
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		d.complete(results, &inflight)
	}()

	d.log.InfoContext(ctx, "dispatcher started", slog.String("table", channel),
		slog.Int("workers", d.cfg.Workers), slog.Int("batch_size", d.cfg.BatchSize),
		slog.Duration("lease", d.cfg.Lease), slog.Bool("ordered", d.cfg.Ordered))
	d.fetch(ctx, drain, jobs, &inflight, int64(limit))

	close(jobs)
	workWG.Wait()
	close(results)
	<-completed
	stopBeating()
	beatWG.Wait()
	stopListening()
	listenWG.Wait()
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.store.Unwait(cleanup, d.pool, d.cfg.Owner); err != nil {
		d.log.DebugContext(ctx, "could not clear waiter row", slog.Any("error", err))
	}
	d.log.InfoContext(ctx, "dispatcher stopped")
	return nil
}

// fetch claims batches while there is capacity and work, sleeping on
// notifications and the poll interval when there is none. It returns when
// ctx is done, or in drain mode when nothing is left to deliver.
func (d *Dispatcher) fetch(ctx context.Context, drain bool, jobs chan<- *job, inflight *atomic.Int64, limit int64) {
	var (
		buf        []store.Row
		waiting    bool // our waiter row is registered
		clearWait  bool // clear it with the next claim
		errBackoff time.Duration
		// registeredAt is when the waiter row was last registered.
		registeredAt time.Time
		// cursor is where the ordered claim's sweep over aggregates resumes
		// (nil: at the first aggregate).
		cursor *string
		cool   = cooldown{max: d.cfg.FetchCooldown}
	)
	poll := time.NewTimer(d.cfg.PollInterval)
	defer poll.Stop()
	sleep := func(extra <-chan struct{}, dur time.Duration) bool {
		poll.Reset(dur)
		select {
		case <-ctx.Done():
			return false
		case <-d.wake:
		case <-extra:
		case <-poll.C:
		}
		return true
	}
	for ctx.Err() == nil {
		room := d.sizer.claimRoom(limit, inflight.Load(), d.cfg.BatchSize)
		if room == 0 {
			// The workers hold as many rows as they can start well inside
			// the lease: wait for the completer.
			select {
			case <-ctx.Done():
				return
			case <-d.freed:
			}
			continue
		}
		batch, wait, extra := d.claimGate(inflight.Load())
		batch = min(batch, int(room))
		if batch == 0 {
			if !sleep(extra, wait) {
				return
			}
			continue
		}
		start := time.Now()
		// The claim is not cancelled by shutdown: a claim cut off after the
		// server committed it would strand its rows until their leases
		// expire. Rows it returns after shutdown began are released.
		claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		params := store.ClaimParams{
			Owner:       d.cfg.Owner,
			Batch:       batch,
			Lease:       d.cfg.Lease,
			MaxAttempts: d.cfg.MaxAttempts,
			ClearWait:   clearWait,
			Cursor:      cursor,
		}
		var rows []store.Row
		var dbNow time.Time
		var err error
		if d.cfg.Ordered {
			rows, dbNow, cursor, err = d.store.ClaimOrdered(claimCtx, d.pool, params, buf)
		} else {
			rows, dbNow, err = d.store.Claim(claimCtx, d.pool, params, buf)
		}
		cancelClaim()
		if err == nil {
			cool.claimed(time.Since(start), len(rows), clearWait)
		}
		d.breaker.claimed(len(rows))
		d.stats.claims.Add(1)
		d.hook.OnClaim(ClaimEvent{Rows: len(rows), Duration: time.Since(start), Err: err})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			errBackoff = min(max(errBackoff*2, 50*time.Millisecond), d.cfg.PollInterval, 5*time.Second)
			d.logClaimError(ctx, err, errBackoff)
			if !sleep(nil, errBackoff) {
				return
			}
			continue
		}
		errBackoff = 0
		if clearWait {
			clearWait, waiting = false, false
		}
		if len(rows) > 0 {
			failpoint.Hit("after-claim")
			d.stats.claimed.Add(int64(len(rows)))
			inflight.Add(int64(len(rows)))
			deadline := start.Add(d.cfg.Lease - d.cfg.Lease/10)
			claimedAt := time.Now()
			for i := range rows {
				r := &rows[i]
				j := &job{
					msg: Message{
						ID: r.ID, IDNamespace: d.cfg.IDNamespace, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
						EventType: r.EventType, Payload: r.Payload, CreatedAt: r.CreatedAt,
						Attempt: r.Attempts, FencingToken: r.LeaseVersion, Headers: d.headers(r),
					},
					dbNow:     dbNow,
					claimedAt: claimedAt,
				}
				j.setDeadline(deadline)
				jobs <- j
			}
			buf = rows[:0]
			if len(rows) < batch {
				// A partial batch: the backlog is drained and rows trickle
				// in. Claiming again at once would take them a few at a
				// time, each claim and finalize costing the database nearly
				// what a full batch does; pacing claims by what they cost
				// (see cooldown) batches a trickle at the price of that
				// much latency.
				if !pause(ctx, cool.pause()) {
					return
				}
			}
			continue
		}
		// Nothing claimable now.
		if drain {
			if inflight.Load() > 0 {
				if !sleep(d.freed, d.cfg.PollInterval) {
					return
				}
				continue
			}
			more, err := d.store.Undelivered(ctx, d.pool, d.cfg.Ordered)
			if err == nil && !more {
				return
			}
		}
		if d.listening.Load() && !waiting {
			// Producers notify while we are registered, and every notifying
			// commit takes a global lock. Registering at most once per
			// cooldown bounds that cost under a trickle of inserts, at the
			// price of up to one cooldown of latency; until then, poll.
			if wait := cool.spacing() - time.Since(registeredAt); wait > 0 {
				if !sleep(d.headFreed(), wait) {
					return
				}
				continue
			}
			// Register as idle, then look once more: a row committed
			// before the registration was visible to producers would
			// otherwise wait a whole poll interval.
			if err := d.store.Wait(ctx, d.pool, d.cfg.Owner, 3*d.cfg.PollInterval); err == nil {
				waiting, registeredAt = true, time.Now()
				continue
			}
		}
		if !sleep(d.headFreed(), d.cfg.PollInterval) {
			return
		}
		clearWait = waiting
	}
}

// claimGate is how many rows the next claim may take: a batch, one row as
// the probe of a paused sink, or none, in which case the fetcher sleeps for
// wait or until extra fires (the probe's finalize).
func (d *Dispatcher) claimGate(inflight int64) (batch int, wait time.Duration, extra <-chan struct{}) {
	limit, wait := d.breaker.gate(inflight)
	switch {
	case wait > 0:
		return 0, wait, nil
	case limit == 0:
		return 0, d.cfg.PollInterval, d.freed
	case limit > 0:
		return min(limit, d.cfg.BatchSize), 0, nil
	}
	return d.cfg.BatchSize, 0, nil
}

// headFreed is what, besides a notification, ends an idle wait: in ordered
// mode a finalize may free the head of an aggregate whose next message is
// already waiting, and no producer notifies about that, so the completer's
// signal wakes the fetcher; otherwise nothing (a finalize frees no row).
func (d *Dispatcher) headFreed() <-chan struct{} {
	if d.cfg.Ordered {
		return d.freed
	}
	return nil
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
	return d.sink.Publish(ctx, msg)
}

type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// headers are a claimed row's headers, decoded by the store; a column that
// is not a JSON object is dropped with a warning.
func (d *Dispatcher) headers(r *store.Row) map[string]string {
	if r.BadHeaders {
		d.log.Warn("ignoring headers that are not a JSON object", slog.Int64("outbox_id", r.ID))
	}
	return r.Headers
}

// pause waits d, or until ctx is done (false).
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// logClaimError logs a failed claim, with the fix when a transaction
// pooler caused it (the start-up statements may have met a clean session).
func (d *Dispatcher) logClaimError(ctx context.Context, err error, retryIn time.Duration) {
	attrs := []any{slog.Any("error", err), slog.Duration("retry_in", retryIn)}
	if IsPoolerError(err) {
		attrs = append(attrs, slog.String("fix", PoolerFix))
	}
	d.log.ErrorContext(ctx, "claim failed; retrying", attrs...)
}
