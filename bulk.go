package outbox

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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
	// Bound pins the action to what its preview saw; see [Bound]. Nil
	// pins it to the table as the action starts.
	Bound *Bound
	// IncludeNewer lifts the pin: rows that come to match while the action
	// runs are acted on too, and the total is not fixed at the start.
	IncludeNewer bool
	// Total, when set, is called once before the first batch with the
	// number of rows the pinned action will act on at most (with
	// IncludeNewer, how many match then).
	Total func(n int64)
}

// Bound pins a bulk action to the rows its preview counted, so that what
// producers and dispatchers do meanwhile cannot widen it: only rows with an
// id up to MaxID, and at most Limit of them ([NoLimit]: as many as match
// within MaxID when the action starts). [Admin.PreviewMatching] returns the
// bound it counted within.
type Bound struct {
	MaxID int64
	Limit int64
}

// NoLimit is a [Bound]'s Limit when the preview's count was not exact.
const NoLimit = -1

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
	// Bound, IncludeNewer and Total are [BulkOpts]'.
	Bound        *Bound
	IncludeNewer bool
	Total        func(n int64)
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
		batch: o.BatchSize, progress: o.Progress, bound: o.Bound, includeNewer: o.IncludeNewer, total: o.Total})
}

// DeadSkipMatching marks every dead message matching f done without
// delivering it (unblocking ordered aggregates), in bounded batches fenced
// like [Admin.DeadRetryMatching].
func (a *Admin) DeadSkipMatching(ctx context.Context, f Filter, o BulkOpts) (int64, error) {
	return a.bulk(ctx, store.ActionDeadSkip, "dead", f, bulkRun{dryRun: o.DryRun, actor: o.Actor,
		batch: o.BatchSize, progress: o.Progress, bound: o.Bound, includeNewer: o.IncludeNewer, total: o.Total})
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
		rate: o.Rate, batch: o.BatchSize, progress: o.Progress, bound: o.Bound, includeNewer: o.IncludeNewer, total: o.Total})
}

// Validate reports the first option a replay cannot run with, as a
// [*ReplayOptsError]: a Name that is not 1 to 100 letters, digits, '.', '_',
// ':' or '-' (starting with a letter or digit), or a Rate that is not 0
// (unlimited) or between MinReplayRate and MaxReplayRate. [Admin.Replay] calls it first; callers that start a replay in
// the background call it before, so the mistake is the caller's answer.
func (o ReplayOpts) Validate() error {
	if !replayName.MatchString(o.Name) {
		return &ReplayOptsError{Field: "Name", Reason: fmt.Sprintf("%q must be 1 to 100 letters, digits, "+
			"'.', '_', ':' or '-', starting with a letter or digit", o.Name)}
	}
	if o.Rate != 0 && !(o.Rate >= MinReplayRate && o.Rate <= MaxReplayRate) { // NaN fails both
		return &ReplayOptsError{Field: "Rate", Reason: fmt.Sprintf("must be %s to %s messages per second, or 0 (unlimited), got %v",
			strconv.FormatFloat(MinReplayRate, 'f', -1, 64), strconv.FormatFloat(MaxReplayRate, 'f', -1, 64), o.Rate)}
	}
	return nil
}

// The bounds of [ReplayOpts.Rate] other than 0. Below the least, the pace's
// wait (messages done over the rate) overflows a time.Duration within a
// replay's length and the replay would run unpaced.
const (
	MinReplayRate = 0.01
	MaxReplayRate = 1_000_000.0
)

// ReplayOptsError reports [ReplayOpts] a replay cannot run with.
type ReplayOptsError struct {
	Field  string // Name or Rate
	Reason string
}

func (e *ReplayOptsError) Error() string { return "outbox: replay: " + e.Field + " " + e.Reason }

type bulkRun struct {
	dryRun       bool
	actor        string
	name         string
	rate         float64
	batch        int
	progress     func(int64)
	bound        *Bound
	includeNewer bool
	total        func(int64)
}

func (a *Admin) bulk(ctx context.Context, action store.Action, status string, f Filter, r bulkRun) (int64, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return 0, err
	}
	if err := checkStatus(string(action), status, f); err != nil {
		return 0, err
	}
	table, err := a.store.Resolve(ctx, a.db)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", label(string(action)), err)
	}
	entry := AuditEntry{Actor: r.actor, Action: string(action), Name: r.name, Filter: f.Terms(), DryRun: r.dryRun}
	scoped := store.Filter(f)
	scoped.Status = []string{status}
	limit := int64(-1) // unpinned
	switch {
	case !r.includeNewer:
		if scoped, limit, err = a.pin(ctx, scoped, r.bound); err != nil {
			return 0, fmt.Errorf("outbox: %s: %w", label(string(action)), err)
		}
		if r.total != nil {
			r.total(limit)
		}
	case r.total != nil:
		// Unpinned: what matches now, as the best estimate of the total.
		if n, err := a.store.Count(ctx, a.db, scoped, 0); err == nil {
			r.total(n)
		}
	}
	if r.dryRun {
		n := limit
		if n < 0 {
			if n, err = a.store.Count(ctx, a.db, scoped, 0); err != nil {
				return 0, fmt.Errorf("outbox: %s: %w", label(string(action)), err)
			}
		}
		entry.Count = n
		return n, a.auditDryRun(ctx, entry)
	}
	auditID, err := a.auditStart(ctx, entry)
	if err != nil {
		return 0, err
	}
	scoped.Status = f.Status // the batch statements fence on the action's status themselves
	p := store.BatchParams{Filter: scoped, Size: batchSize(r.batch, r.rate), AuditID: auditID,
		Channel: table.Channel(), Name: r.name}
	total, runErr := a.batches(ctx, action, p, r, limit)
	entry.Count = total
	if err := a.auditEnd(ctx, auditID, entry, nil, runErr); err != nil && runErr == nil {
		runErr = err
	}
	return total, runErr
}

// pin narrows f to the bound's ids (to the table's highest id now, with
// no bound) and returns how many rows the action may move: the exact count
// of f within them now, no more than the bound's Limit.
func (a *Admin) pin(ctx context.Context, f store.Filter, b *Bound) (store.Filter, int64, error) {
	if b == nil {
		maxID, _, err := a.store.MaxID(ctx, a.db)
		if err != nil {
			return f, 0, err
		}
		b = &Bound{MaxID: maxID, Limit: NoLimit}
	}
	if b.MaxID <= 0 {
		return f, 0, nil // the preview saw an empty table: nothing to act on
	}
	f.IDMax = upTo(f.IDMax, b.MaxID)
	n, err := a.store.Count(ctx, a.db, f, 0)
	if err != nil {
		return f, 0, err
	}
	if b.Limit >= 0 {
		n = min(n, b.Limit)
	}
	return f, n, nil
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

// checkStatus refuses a filter naming a status action does not act on.
func checkStatus(action, status string, f Filter) error {
	if slices.ContainsFunc(f.Status, func(s string) bool { return s != status }) {
		return &FilterError{Term: "status",
			Err: fmt.Errorf("%s acts on %s messages only, not %s", label(action), status, f.sortedStatusText())}
	}
	return nil
}

// upTo is an id_max narrowed to at most bound (0, no id_max, is bound).
func upTo(idMax, bound int64) int64 {
	if idMax == 0 || idMax > bound {
		return bound
	}
	return idMax
}

// batches runs the batches until one comes back short, or limit rows
// moved (limit < 0: no limit), pacing them by rate.
func (a *Admin) batches(ctx context.Context, action store.Action, p store.BatchParams, r bulkRun, limit int64) (int64, error) {
	pace := a.pace.start(r.rate)
	size := p.Size
	var total int64
	for {
		if limit == 0 {
			return 0, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("outbox: %s: stopped after %d: %w", label(string(action)), total, err)
		}
		if limit >= 0 {
			p.Size = int(min(int64(size), limit-total))
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
		if b.Picked < int64(p.Size) || limit >= 0 && total >= limit {
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

// Preview is what [Admin.PreviewMatching] counted and the bound it counted
// within: pass Bound to the action (BulkOpts.Bound, ReplayOpts.Bound) and it
// acts on no row the preview did not consider, and on no more rows than
// it counted when the count is exact (Bound.Limit is then Count.N; for a
// capped or partial count it is NoLimit, and the action counts at its
// start).
type Preview struct {
	Count
	Bound Bound
	At    time.Time // the database's clock when the bound was taken
}

// PreviewMatching is a dry run of [Admin.DeadRetryMatching] (action
// "dead_retry"), [Admin.DeadSkipMatching] ("dead_skip") or [Admin.Replay]
// ("replay") that stays fast however large the table: its count is a
// non-exact [Admin.Count]'s of f narrowed to the action's status and to
// the table's ids at the time (Capped past CountCap; Partial, among the
// newest rows of a bounded window, for a filter with a term no index
// serves). It is audited as a dry run with that count.
func (a *Admin) PreviewMatching(ctx context.Context, action string, f Filter, o PreviewOpts) (Preview, error) {
	status := map[string]string{string(store.ActionDeadRetry): "dead", string(store.ActionDeadSkip): "dead",
		string(store.ActionReplay): "done"}[action]
	if status == "" {
		return Preview{}, fmt.Errorf("outbox: preview: unknown action %q (want dead_retry, dead_skip or replay)", action)
	}
	if err := checkStatus(action, status, f); err != nil {
		return Preview{}, err
	}
	maxID, at, err := a.store.MaxID(ctx, a.db)
	if err != nil {
		return Preview{}, fmt.Errorf("outbox: preview: %w", err)
	}
	scoped := f
	scoped.Status = []string{status}
	scoped.IDMax = upTo(scoped.IDMax, maxID)
	p := Preview{Bound: Bound{MaxID: maxID, Limit: NoLimit}, At: at}
	if maxID > 0 {
		if p.Count, err = a.CountWindow(ctx, scoped, o.Window); err != nil {
			return Preview{}, err
		}
	}
	if !p.Capped && !p.Partial {
		p.Bound.Limit = p.N
	}
	entry := AuditEntry{Actor: o.Actor, Action: action, Name: o.Name, Filter: f.Terms(), DryRun: true, Count: p.N}
	return p, a.auditDryRun(ctx, entry)
}
