package outbox

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// BulkBatchDefault is how many rows one batch of a bulk action moves, in
// one statement and one short transaction, unless told otherwise.
const BulkBatchDefault = 500

// BulkOpts tune [Admin.DeadRetryMatching] and [Admin.DeadSkipMatching].
type BulkOpts struct {
	// DryRun counts the matching dead messages and changes nothing (the dry
	// run is still audited).
	DryRun bool
	// Actor is who asks, recorded in the audit row and log line.
	Actor string
	// BatchSize is rows per batch. Defaults to BulkBatchDefault.
	BatchSize int
	// Progress, when set, is called after each batch with the running total.
	Progress func(done int64)
}

// ReplayOpts tune [Admin.Replay].
type ReplayOpts struct {
	// Name is required: it is recorded in the audit row and sent downstream
	// as header Outbox-Replay on every replayed delivery.
	Name string
	// Rate caps replayed messages per second. 0 means unlimited.
	Rate float64
	// DryRun counts the matching done messages and changes nothing.
	DryRun bool
	// Actor is who asks, recorded in the audit row and log line.
	Actor string
	// BatchSize is rows per batch. Defaults to BulkBatchDefault, and to at
	// most one second's worth under Rate.
	BatchSize int
	// Progress, when set, is called after each batch with the running total.
	Progress func(done int64)
}

// replayName keeps a replay's name a valid header value on every broker.
var replayName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// ReplayHeader is the header a replayed delivery carries, its value the
// replay's name. Every sink passes it on.
const ReplayHeader = "Outbox-Replay"

// DeadRetryMatching moves every dead message matching f back to pending
// with a fresh attempt budget, in bounded batches, and wakes the
// dispatchers. Each batch touches only rows that are dead when it runs (a
// row retried and re-claimed meanwhile is left alone) and records its count
// in the audit row in the same transaction. It returns how many it moved
// (for DryRun, how many match). Cancelling ctx stops it between batches or
// rolls back the batch in flight; what was moved stays moved and audited.
func (a *Admin) DeadRetryMatching(ctx context.Context, f Filter, o BulkOpts) (int64, error) {
	return a.bulk(ctx, store.ActionDeadRetry, "dead", f, bulkRun{dryRun: o.DryRun, actor: o.Actor,
		batch: o.BatchSize, progress: o.Progress})
}

// DeadSkipMatching marks every dead message matching f done without
// delivering it (unblocking ordered aggregates), in bounded batches fenced
// like [Admin.DeadRetryMatching].
func (a *Admin) DeadSkipMatching(ctx context.Context, f Filter, o BulkOpts) (int64, error) {
	return a.bulk(ctx, store.ActionDeadSkip, "dead", f, bulkRun{dryRun: o.DryRun, actor: o.Actor,
		batch: o.BatchSize, progress: o.Progress})
}

// Replay delivers again the done messages matching f: each goes back to
// pending with a fresh attempt budget, keeping its id, and carries header
// Outbox-Replay (the replay's name) on its next delivery; receivers that
// deduplicate on the id alone drop it (see docs/replay.md). Batches are
// fenced on status = 'done', paced by Rate, audited and cancellable like
// [Admin.DeadRetryMatching]'s. It returns how many it replayed.
func (a *Admin) Replay(ctx context.Context, f Filter, o ReplayOpts) (int64, error) {
	if err := o.Validate(); err != nil {
		return 0, err
	}
	return a.bulk(ctx, store.ActionReplay, "done", f, bulkRun{dryRun: o.DryRun, actor: o.Actor, name: o.Name,
		rate: o.Rate, batch: o.BatchSize, progress: o.Progress})
}

// Validate reports the first option a replay cannot run with, as a
// [*ReplayOptsError]: a Name that is not 1 to 100 letters, digits, '.', '_',
// ':' or '-' (starting with a letter or digit), or a Rate that is negative or
// not finite. [Admin.Replay] calls it first; callers that start a replay in
// the background call it before, so the mistake is the caller's answer.
func (o ReplayOpts) Validate() error {
	if !replayName.MatchString(o.Name) {
		return &ReplayOptsError{Field: "Name", Reason: fmt.Sprintf("%q must be 1 to 100 letters, digits, "+
			"'.', '_', ':' or '-', starting with a letter or digit", o.Name)}
	}
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return &ReplayOptsError{Field: "Rate", Reason: fmt.Sprintf("must be messages per second or 0 (unlimited), got %v", o.Rate)}
	}
	return nil
}

// ReplayOptsError reports [ReplayOpts] a replay cannot run with.
type ReplayOptsError struct {
	Field  string // Name or Rate
	Reason string
}

func (e *ReplayOptsError) Error() string { return "outbox: replay: " + e.Field + " " + e.Reason }

type bulkRun struct {
	dryRun   bool
	actor    string
	name     string
	rate     float64
	batch    int
	progress func(int64)
}

func (a *Admin) bulk(ctx context.Context, action store.Action, status string, f Filter, r bulkRun) (int64, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return 0, err
	}
	if len(f.Status) > 0 && slices.ContainsFunc(f.Status, func(s string) bool { return s != status }) {
		return 0, &FilterError{Term: "status=" + f.sortedStatusText(),
			Err: fmt.Errorf("%s acts on %s messages only", label(string(action)), status)}
	}
	table, err := a.store.Resolve(ctx, a.db)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", label(string(action)), err)
	}
	entry := AuditEntry{Actor: r.actor, Action: string(action), Name: r.name, Filter: f.Terms(), DryRun: r.dryRun}
	scoped := store.Filter(f)
	scoped.Status = []string{status}
	if r.dryRun {
		n, err := a.store.Count(ctx, a.db, scoped, 0)
		if err != nil {
			return 0, fmt.Errorf("outbox: %s: %w", label(string(action)), err)
		}
		entry.Count = n
		return n, a.auditDryRun(ctx, entry)
	}
	auditID, err := a.auditStart(ctx, entry)
	if err != nil {
		return 0, err
	}
	p := store.BatchParams{Filter: store.Filter(f), Size: batchSize(r.batch, r.rate), AuditID: auditID,
		Channel: table.Channel(), Name: r.name}
	total, runErr := a.batches(ctx, action, p, r)
	entry.Count = total
	if err := a.auditEnd(ctx, auditID, entry, nil, runErr); err != nil && runErr == nil {
		runErr = err
	}
	return total, runErr
}

// label is an action as the user reads it: "dead retry".
func label(action string) string { return strings.ReplaceAll(action, "_", " ") }

func batchSize(size int, rate float64) int {
	if size <= 0 {
		size = BulkBatchDefault
	}
	if rate > 0 {
		size = min(size, max(1, int(rate)))
	}
	return size
}

// batches runs the batches until one comes back short, pacing them by rate.
func (a *Admin) batches(ctx context.Context, action store.Action, p store.BatchParams, r bulkRun) (int64, error) {
	pace := a.pace.start(r.rate)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("outbox: %s: stopped after %d: %w", label(string(action)), total, err)
		}
		// A batch is not cancelled mid-flight: cancelled while its commit
		// is on the way, it would move its rows and report none. The
		// context stops the run between batches, above.
		b, err := a.store.BulkBatch(context.WithoutCancel(ctx), a.db, action, p)
		if err != nil {
			return total, fmt.Errorf("outbox: %s: stopped after %d: %w", label(string(action)), total, err)
		}
		total += b.Moved
		if r.progress != nil && b.Moved > 0 {
			r.progress(total)
		}
		if b.Picked < int64(p.Size) {
			return total, nil
		}
		p.After = b.Cursor
		if err := pace.wait(ctx, total); err != nil {
			return total, fmt.Errorf("outbox: %s: stopped after %d: %w", label(string(action)), total, err)
		}
	}
}

func (f Filter) sortedStatusText() string { return strings.Join(f.sortedStatus(), ",") }

// pacer holds a replay to its rate: after n messages it waits until n/rate
// seconds have passed since the start. Its clock is replaceable for tests.
type pacer struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

type pace struct {
	p     pacer
	rate  float64
	start time.Time
}

func (p pacer) start(rate float64) pace {
	if p.now == nil {
		p.now = time.Now
	}
	if p.sleep == nil {
		p.sleep = sleepCtx
	}
	return pace{p: p, rate: rate, start: p.now()}
}

func (p pace) wait(ctx context.Context, done int64) error {
	if p.rate <= 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(done) / p.rate * float64(time.Second)))
	if d := due.Sub(p.p.now()); d > 0 {
		return p.p.sleep(ctx, d)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PreviewOpts tune [Admin.PreviewMatching].
type PreviewOpts struct {
	Actor  string // who asks, recorded in the audit row and log line
	Name   string // the replay's name, recorded; "" for the dead actions
	Window int    // the count's window (see [Admin.CountWindow]); 0 means SearchWindow
}

// PreviewMatching is a dry run of [Admin.DeadRetryMatching] (action
// "dead_retry"), [Admin.DeadSkipMatching] ("dead_skip") or [Admin.Replay]
// ("replay") that stays fast however large the table: its count is a
// non-exact [Admin.Count]'s of f narrowed to the action's status (Capped
// past CountCap; Partial, among the newest rows of a bounded window, for a
// filter with a term no index serves). It is audited as a dry run with that
// count.
func (a *Admin) PreviewMatching(ctx context.Context, action string, f Filter, o PreviewOpts) (Count, error) {
	status := map[string]string{string(store.ActionDeadRetry): "dead", string(store.ActionDeadSkip): "dead",
		string(store.ActionReplay): "done"}[action]
	if status == "" {
		return Count{}, fmt.Errorf("outbox: preview: unknown action %q (want dead_retry, dead_skip or replay)", action)
	}
	if slices.ContainsFunc(f.Status, func(s string) bool { return s != status }) {
		return Count{}, &FilterError{Term: "status=" + f.sortedStatusText(),
			Err: fmt.Errorf("%s acts on %s messages only", label(action), status)}
	}
	scoped := f
	scoped.Status = []string{status}
	c, err := a.CountWindow(ctx, scoped, o.Window)
	if err != nil {
		return Count{}, err
	}
	entry := AuditEntry{Actor: o.Actor, Action: action, Name: o.Name, Filter: f.Terms(), DryRun: true, Count: c.N}
	return c, a.auditDryRun(ctx, entry)
}
