package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// history records, after each finalize, the attempts of the batch that did
// not deliver (retried, deferred or dead) and whose write held: a write
// fenced off was somebody else's to record. A batch of deliveries records
// nothing, so the happy path runs no statement for it. The completers
// hand each batch's entries to one writer of the run, which records them
// in a statement of their own on its own connection, so a finalize never
// waits for the history: a crash between the two loses the entry, never
// the outcome, and a failure to record is logged and holds nothing up.
type history struct {
	store *store.Store
	pool  *pgxpool.Pool
	owner string
	keep  int
	log   *slog.Logger
	// queue carries each batch's entries to the writer; a full queue
	// makes the completers wait, which bounds what is held in memory.
	queue chan []store.Attempt
}

// newHistory is the run's history, its writer started; nil when
// [Config.AttemptHistory] turns it off. close ends the writer once the
// completers are done.
func (d *Dispatcher) newHistory() *history {
	if d.cfg.AttemptHistory < 0 {
		return nil
	}
	return &history{store: d.store, pool: d.pool, owner: d.cfg.Owner, keep: d.cfg.AttemptHistory, log: d.log,
		queue: make(chan []store.Attempt, 16)}
}

// record queues the entries of batch's verdicts that held.
func (h *history) record(batch []verdict, held []bool) {
	if h == nil {
		return
	}
	var entries []store.Attempt
	for i := range batch {
		v := &batch[i]
		if !held[i] || !v.attempted() {
			continue
		}
		entries = append(entries, store.Attempt{
			ID: v.claim.msg.ID, At: v.ended, Dispatcher: h.owner, Attempt: v.claim.msg.Attempt,
			Duration: v.publishDur, Outcome: string(v.outcome), Status: ResponseStatus(v.err), Error: v.write.Error,
		})
	}
	if len(entries) > 0 {
		h.queue <- entries
	}
}

// run writes what is queued until the queue is closed. A batch is one
// statement: two batches may hold entries of one message, and a statement
// records at most one per message.
func (h *history) run() {
	for entries := range h.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := h.store.RecordAttempts(ctx, h.pool, h.keep, entries); err != nil {
			h.log.Warn("could not record the attempt history", slog.Int("entries", len(entries)), slog.Any("error", err))
		}
		cancel()
	}
}

// attempted reports whether v is a publish that did not deliver: what the
// attempt history records.
func (v *verdict) attempted() bool {
	switch v.outcome {
	case OutcomeRetry, OutcomeDefer, OutcomeDead:
		return !v.ended.IsZero()
	}
	return false
}

// ResponseStatus is the status code of the receiver's answer that err
// carries (an HTTP status, say), or 0 when it carries none. A sink gives
// its errors one with [WithResponseStatus]; the attempt history records it.
func ResponseStatus(err error) int {
	var s interface{ ResponseStatus() int }
	if errors.As(err, &s) {
		return s.ResponseStatus()
	}
	return 0
}

// WithResponseStatus returns err carrying the receiver's status code, for
// [ResponseStatus]; err's text and what it wraps are unchanged, so
// [IsPermanent], [IsRetryable] and the like read it as before.
func WithResponseStatus(err error, status int) error {
	if err == nil {
		return nil
	}
	return &statusError{err: err, status: status}
}

type statusError struct {
	err    error
	status int
}

func (e *statusError) Error() string       { return e.err.Error() }
func (e *statusError) Unwrap() error       { return e.err }
func (e *statusError) ResponseStatus() int { return e.status }
