package outbox

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/internal/store"
)

// claimed is one leased row on its way from the fetcher to a worker. It is
// not changed after the fetcher emits it (chains set dropped on a row still
// queued, under their lock); what changes while the row is in the
// dispatcher (its deadline, its publish) lives in the lease registry.
type claimed struct {
	msg Message
	// dbNow is the database's now() at claim time; claimedAt the local
	// monotonic time then. Together they date an outcome on the database's
	// clock.
	dbNow     time.Time
	claimedAt time.Time
	// born is the row's created_at as claimed, kept apart from msg,
	// which the sink may change: the fenced write includes it.
	born time.Time
	// agg is the row's aggregate as claimed, its chain's key, and chain
	// the chain it joined (see chains); dropped marks a row whose chain
	// broke before it went out: it is released unpublished.
	agg     string
	chain   *chain
	dropped bool
	// entry is the lease's entry in the registry (set as the row is
	// registered, before it goes to a worker).
	entry *lease.Entry
}

func (c *claimed) lease() store.Lease { return store.Lease{ID: c.msg.ID, Version: c.msg.FencingToken} }

// dbTime is the database's clock now, as estimated from the claim.
func (c *claimed) dbTime() time.Time { return c.dbNow.Add(time.Since(c.claimedAt)) }

// fetcher claims batches while there is capacity and work, and hands each
// claimed row to the workers. With no work it sleeps on notifications and
// the poll interval. It owns the claim loop's state: the waiter
// registration, the ordered sweep's cursor, the cooldown and the error
// backoff.
type fetcher struct {
	engine
	cfg     fetchConfig
	mode    lease.Mode
	store   *store.Store
	pool    *pgxpool.Pool
	sizer   *claimSizer
	breaker *breaker
	// wake fires when a notification arrived; listening tells whether
	// the listener is up, so that registering as a waiter is worth it.
	wake      <-chan struct{}
	listening *atomic.Bool
	// due is set when a notification said messages were made due earlier
	// than the mode knows; dueAt is when the mode last looked again.
	due   *atomic.Bool
	dueAt time.Time
	// dues are when the retries and defers the dispatcher wrote come due
	// (see Dispatcher.dues).
	dues *dueTimes
	// pauses are the operator's pauses: the whole table paused, nothing
	// is claimed. wakeFailing is whether the last wake of the messages
	// held back for a pause failed (logged once until one succeeds).
	pauses      *pauseGate
	wakeFailing bool
	// idleEvery is the idle wait of a registered listener: PollInterval,
	// doubled by each poll that found nothing, up to IdlePollMax.
	idleEvery time.Duration
	// polled is whether the last sleep ended on its timer.
	polled bool

	drain  bool // return once nothing is left to deliver
	slots  *slots
	leases *lease.Registry
	// chains order an aggregate's messages in flight when the mode claims
	// several of them at once; nil otherwise.
	chains *chains
	out    chan<- *claimed

	waiting    bool // our waiter row is registered
	clearWait  bool // clear it with the next claim
	errBackoff time.Duration
	// registeredAt is when the waiter row was last registered.
	registeredAt time.Time
	cool         cooldown
	poll         *time.Timer
	// down follows a run of failed claims, so an outage is logged as it
	// begins, once a minute while it lasts, and as it ends.
	down service.Outage
}

// fetchConfig is what the fetcher reads of the dispatcher's config.
type fetchConfig struct {
	batch       int
	cooldown    time.Duration // FetchCooldown
	poll        time.Duration // PollInterval
	idleMax     time.Duration // IdlePollMax
	owner       string        // its waiter row's
	idNamespace string        // stamped on each message
}

func (c *Config) fetchConfig() fetchConfig {
	return fetchConfig{batch: c.BatchSize, cooldown: c.FetchCooldown, poll: c.PollInterval, idleMax: c.IdlePollMax, owner: c.Owner, idNamespace: c.IDNamespace}
}

// run claims until ctx is done, or in drain mode until nothing is left.
func (f *fetcher) run(ctx context.Context) {
	f.cool = cooldown{max: f.cfg.cooldown}
	f.poll = time.NewTimer(f.cfg.poll)
	defer f.poll.Stop()
	for ctx.Err() == nil && f.step(ctx) {
	}
}

// handOrphans hands the workers messages released behind a hung publish.
func (f *fetcher) handOrphans(orphans []*claimed) {
	for _, c := range orphans {
		f.chains.handing()
		f.out <- c
	}
}

// finish, once the fetcher stopped, hands the workers the messages a
// publish found hung orphans until they are done with every message handed
// to them: nothing else releases those, and an orphan never settled keeps
// its batch from being written, and under snapshot cursors every batch of
// its shard read after it, delivered or not.
func (f *fetcher) finish() {
	if f.chains == nil {
		return
	}
	for {
		// Read before the orphans are taken: an orphan comes while its
		// hung publish's worker is not done, so none comes after this
		// reads zero.
		idle := f.chains.working.Load() == 0
		orphans := f.chains.takeOrphans()
		if idle && len(orphans) == 0 {
			return
		}
		f.handOrphans(orphans)
		if len(orphans) == 0 {
			select {
			case <-f.chains.idle:
			case <-f.wake:
			}
		}
	}
}

// step is one turn of the loop: wait for room, claim, then hand the rows
// over or go idle. It returns false when the fetcher is to stop.
func (f *fetcher) step(ctx context.Context) bool {
	if f.chains != nil {
		f.handOrphans(f.chains.takeOrphans())
	}
	room := f.slots.room(f.sizer, f.cfg.batch)
	if room == 0 {
		// The workers hold as many rows as they can start well inside
		// the lease: wait for the completer, or for a wake-up (messages
		// released behind a hung publish are to be handed over).
		select {
		case <-ctx.Done():
			return false
		case <-f.slots.released():
			return true
		case <-f.wake:
			return true
		}
	}
	f.pauses.look(ctx, false)
	f.wakePaused(ctx)
	if f.pauses.whole() {
		return f.sleep(ctx, nil, f.cfg.poll)
	}
	batch, wait, extra := f.gate()
	batch = min(batch, int(room))
	if batch == 0 {
		return f.sleep(ctx, extra, wait)
	}
	start := f.clock.Now()
	rows, dbNow, err := f.claim(ctx, batch)
	if err != nil {
		return f.claimFailed(ctx, err)
	}
	f.errBackoff = 0
	if took, tries, ended := f.down.Recovered(f.clock.Now()); ended {
		f.log.InfoContext(ctx, "claims succeed again", slog.Duration("failing_for", took), slog.Int("failed_claims", tries))
	}
	switch {
	case f.clearWait:
		f.clearWait, f.waiting = false, false
	case f.waiting && len(rows) > 0:
		// A poll found rows while registered: busy now, the next claim
		// takes the waiter row away, so producers stop notifying.
		f.clearWait = true
	}
	if f.chains != nil {
		rows = f.admit(rows)
	}
	// Counted as handed over: a row its chain did not admit is no probe.
	f.breaker.claimed(len(rows))
	if len(rows) == 0 {
		return f.idle(ctx)
	}
	f.pauses.look(ctx, true)
	f.emit(rows, start, dbNow)
	if len(rows) < batch {
		// A partial batch: the backlog is drained and rows trickle in.
		// Claiming again at once would take them a few at a time, each
		// claim and finalize costing the database nearly what a full batch
		// does; pacing claims by what they cost (see cooldown) batches a
		// trickle at the price of that much latency.
		return service.Sleep(ctx, f.cool.pause())
	}
	return true
}

// dueLookPolls is how many poll intervals apart a dispatcher that does not
// listen looks again at what it knows to wait (see claim).
const dueLookPolls = 10

// claim runs one claim statement for up to batch rows. The claim is not
// cancelled by shutdown: a claim cut off after the server committed it
// would strand its rows until their leases expire. Rows it returns after
// shutdown began are released by the workers.
func (f *fetcher) claim(ctx context.Context, batch int) ([]store.Row, time.Time, error) {
	switch {
	case f.due != nil && f.due.Swap(false):
		f.mode.Due()
		f.dueAt = f.clock.Now()
	case f.listening != nil && !f.listening.Load() && f.clock.Since(f.dueAt) >= dueLookPolls*f.cfg.poll:
		// No notification can say that messages were made due earlier
		// (retry now) while the listener is down or off (--no-notify):
		// look again every few polls instead.
		f.mode.Due()
		f.dueAt = f.clock.Now()
	}
	start := f.clock.Now()
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if f.chains != nil {
		f.chains.reading()
	}
	rows, dbNow, err := f.mode.Claim(claimCtx, batch, f.clearWait)
	if err == nil {
		f.cool.claimed(f.clock.Since(start), len(rows), f.clearWait)
	}
	f.stats.claims.Add(1)
	f.hook.OnClaim(ClaimEvent{Rows: len(rows), Duration: f.clock.Since(start), Err: err})
	return rows, dbNow, err
}

// emit takes slots for claimed rows, registers their leases and hands them
// to the workers. start is when the claim was sent: leases are measured
// from then.
func (f *fetcher) emit(rows []store.Row, start, dbNow time.Time) {
	failpoint.Hit("after-claim")
	f.stats.claimed.Add(int64(len(rows)))
	f.slots.take(len(rows))
	claimedAt := time.Now()
	claims := make([]claimed, len(rows))
	leases := make([]store.Lease, len(rows))
	for i := range rows {
		r := &rows[i]
		claims[i] = claimed{
			msg: Message{
				ID: r.ID, UID: r.UID, IDNamespace: f.cfg.idNamespace, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
				EventType: r.EventType, Payload: r.Payload, CreatedAt: r.CreatedAt,
				Attempt: r.Attempts, FencingToken: r.LeaseVersion, Headers: f.headers(r),
			},
			dbNow:     dbNow,
			claimedAt: claimedAt,
			born:      r.CreatedAt,
			agg:       r.AggregateID,
		}
		leases[i] = claims[i].lease()
	}
	entries := f.leases.Add(leases, f.mode.Deadline(start))
	for i := range claims {
		claims[i].entry = &entries[i]
	}
	for i := range claims {
		if f.chains == nil {
			f.out <- &claims[i]
		} else if f.chains.start(&claims[i]) {
			f.chains.handing()
			f.out <- &claims[i]
		}
	}
}

// admit keeps the rows whose chain may take them (see chains.admit); the
// others are forgotten by the mode unpublished and unwritten, and read
// again once the row before them is settled.
func (f *fetcher) admit(rows []store.Row) []store.Row {
	kept, dropped := f.chains.admit(rows)
	if len(dropped) > 0 {
		forget := make([]store.RowWrite, len(dropped))
		for i, r := range dropped {
			forget[i] = store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion}
		}
		f.mode.Settled(forget)
	}
	return kept
}

// claimFailed backs off after a failed claim; database errors are never
// fatal, since delivery must resume once the database does.
func (f *fetcher) claimFailed(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	f.errBackoff = min(max(f.errBackoff*2, 50*time.Millisecond), f.cfg.poll, 5*time.Second)
	f.logClaimError(ctx, err, f.errBackoff)
	return f.sleep(ctx, nil, f.errBackoff)
}

// idle waits after a claim found nothing claimable. In drain mode it
// returns false once nothing is left to deliver.
//
// A dispatcher whose producers' commits wake it (listening, its waiter row
// registered) needs its polls only for what no commit announces: leases
// run out, retries written by others come due. Those polls back off, from
// PollInterval doubling to IdlePollMax, and keep the waiter row: a
// thousand idle tables cost a thousand statements per IdlePollMax, not
// three thousand per PollInterval. The first polls after registering come
// soon, so that a row whose insert began before the registration and
// committed after its sweep waits about as long as its transaction ran.
func (f *fetcher) idle(ctx context.Context) bool {
	if f.drain {
		if f.slots.inUse() > 0 {
			return f.sleep(ctx, f.slots.released(), f.cfg.poll)
		}
		more, err := f.mode.Undelivered(ctx)
		if err == nil && !more {
			return false
		}
	}
	if f.listening.Load() && !f.waiting {
		// Producers notify while we are registered, and every notifying
		// commit takes a global lock. Registering at most once per
		// cooldown bounds that cost under a trickle of inserts, at the
		// price of up to one cooldown of latency; until then, poll.
		if wait := f.cool.spacing() - f.clock.Since(f.registeredAt); wait > 0 {
			return f.sleep(ctx, f.headFreed(), wait)
		}
		// Register as idle, then look once more, everywhere (Sweep): a row
		// committed before the registration was visible to producers
		// would otherwise wait a whole poll interval.
		if err := f.register(ctx); err == nil {
			f.idleEvery = f.cfg.poll
			f.mode.Sweep()
			// The claim that follows sees every commit that notified so
			// far: a wake-up already pending (the listener's start, say)
			// would only wake the idle fetcher again for nothing, and its
			// claim would clear the waiter row just registered.
			select {
			case <-f.wake:
			default:
			}
			return true
		}
	}
	registered := f.waiting && f.listening.Load()
	wait, soon := f.cfg.poll, (<-chan struct{})(nil)
	if registered {
		wait, soon = f.idleWait(), f.dues.soon
	}
	f.hook.OnIdle(IdleEvent{Registered: registered, Wait: wait})
	if !f.sleepIdle(ctx, f.headFreed(), wait, soon) {
		return false
	}
	if registered && f.polled && f.listening.Load() {
		// No commit woke us: still idle, and still registered. The claim
		// looks everywhere: it is for what no commit announced.
		f.backOff(ctx)
		f.mode.Sweep()
		return true
	}
	f.clearWait = f.waiting
	return true
}

// register records the fetcher as an idle listener (its waiter row) for
// four of its longest idle waits; backOff renews it after two.
func (f *fetcher) register(ctx context.Context) error {
	if err := f.store.Wait(ctx, f.pool, f.cfg.owner, 4*f.cfg.idleMax); err != nil {
		return err
	}
	f.waiting, f.registeredAt = true, f.clock.Now()
	return nil
}

// idleWait is how long a registered idle fetcher sleeps: its back-off
// spread by ±20% (tables started together drift apart), ending at the
// latest when a retry or defer it wrote comes due.
func (f *fetcher) idleWait() time.Duration {
	wait := f.idleEvery
	if wait > f.cfg.poll {
		wait = time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
	}
	if due, ok := f.dues.next(); ok {
		wait = max(min(wait, due.Sub(f.clock.Now())), 0)
	}
	return wait
}

// backOff follows a poll that no commit woke: the next wait doubles, but a
// retry or defer that came due starts the back-off again (the database's
// clock may run behind ours: it is looked for again soon); the waiter row
// is renewed before it runs out.
func (f *fetcher) backOff(ctx context.Context) {
	now := f.clock.Now()
	if f.dues.drop(now) {
		f.idleEvery = f.cfg.poll
	} else {
		f.idleEvery = min(2*f.idleEvery, f.cfg.idleMax)
	}
	if f.clock.Since(f.registeredAt) >= 2*f.cfg.idleMax {
		if f.register(ctx) != nil {
			f.clearWait = true // idle registers again after the claim
		}
	}
}

// sleep waits for dur, a notification or extra; false when ctx ended.
func (f *fetcher) sleep(ctx context.Context, extra <-chan struct{}, dur time.Duration) bool {
	return f.sleepIdle(ctx, extra, dur, nil)
}

// sleepIdle is sleep for a registered idle fetcher, whose wait the
// back-off may have made long: signalled on soon, it looks again when the
// next retry or defer it wrote comes due, and ends the sleep then if that
// is sooner. (Other sleeps keep PollInterval as the bound of a retry's
// lateness, as configured.)
func (f *fetcher) sleepIdle(ctx context.Context, extra <-chan struct{}, dur time.Duration, soon <-chan struct{}) bool {
	f.poll.Reset(dur)
	f.polled = false
	end := f.clock.Now().Add(dur)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-f.wake:
		case <-extra:
		case <-f.poll.C:
			f.polled = true
		case <-soon:
			if due, ok := f.dues.next(); ok && due.Before(end) {
				end = due
				f.poll.Reset(max(due.Sub(f.clock.Now()), 0))
			}
			continue
		}
		return true
	}
}

// gate is how many rows the next claim may take: a batch, one row as the
// probe of a paused sink, or none, in which case the fetcher sleeps for
// wait or until extra fires (the probe's finalize).
func (f *fetcher) gate() (batch int, wait time.Duration, extra <-chan struct{}) {
	limit, wait := f.breaker.gate(f.slots.inUse())
	switch {
	case wait > 0:
		return 0, wait, nil
	case limit == 0:
		return 0, f.cfg.poll, f.slots.released()
	case limit > 0:
		return min(limit, f.cfg.batch), 0, nil
	}
	return f.cfg.batch, 0, nil
}

// headFreed is what, besides a notification, ends an idle wait: when each
// aggregate is delivered in order (ordered rows, shard leases) a finalize
// may free the head of an aggregate whose next message is already waiting,
// and no producer notifies about that, so the completer's give-back wakes
// the fetcher; otherwise nothing (a finalize frees no row).
func (f *fetcher) headFreed() <-chan struct{} {
	if f.mode.Ordered() {
		return f.slots.released()
	}
	return nil
}

// headers are a claimed row's headers, decoded by the store; a column that
// is not a JSON object is logged and dropped.
func (f *fetcher) headers(r *store.Row) map[string]string {
	if r.BadHeaders {
		f.log.Warn("ignoring headers that are not a JSON object", slog.Int64("outbox_id", r.ID))
	}
	return r.Headers
}

// logClaimError logs a failed claim, with the fix when a transaction
// pooler caused it (the start-up statements may have met a clean session).
// A failure that repeats (the database is down) is logged once, then once
// a minute, then at debug level; the first claim that succeeds says how
// long claims failed.
func (f *fetcher) logClaimError(ctx context.Context, err error, retryIn time.Duration) {
	level := f.down.Failed(f.clock.Now(), err, slog.LevelError)
	attrs := []any{slog.Any("error", err), slog.Duration("retry_in", retryIn)}
	if IsPoolerError(err) {
		attrs = append(attrs, slog.String("fix", PoolerFix))
	}
	msg := "claim failed; retrying"
	if since, tries, _ := f.down.Down(); tries > 1 {
		msg = "claims still failing; retrying"
		attrs = append(attrs, slog.Duration("failing_for", f.clock.Since(since)), slog.Int("failed_claims", tries))
	}
	f.log.Log(ctx, level, msg, attrs...)
}
