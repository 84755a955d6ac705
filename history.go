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
// nothing, so the happy path runs no statement for it. Recording is a
// statement of its own after the finalize: a crash between the two loses
// the entry, never the outcome, and a failure to record is logged and
// does not hold the relay up.
type history struct {
	store *store.Store
	pool  *pgxpool.Pool
	owner string
	keep  int
	log   *slog.Logger

	entries []store.Attempt
}

// newHistory is the dispatcher's history; nil when [Config.AttemptHistory]
// turns it off.
func (d *Dispatcher) newHistory() *history {
	if d.cfg.AttemptHistory < 0 {
		return nil
	}
	return &history{store: d.store, pool: d.pool, owner: d.cfg.Owner, keep: d.cfg.AttemptHistory, log: d.log}
}

// record writes the entries of batch's verdicts that held.
func (h *history) record(batch []verdict, held []bool) {
	if h == nil {
		return
	}
	h.entries = h.entries[:0]
	for i := range batch {
		v := &batch[i]
		if !held[i] || !v.attempted() {
			continue
		}
		h.entries = append(h.entries, store.Attempt{
			ID: v.claim.msg.ID, At: v.ended, Dispatcher: h.owner, Attempt: v.claim.msg.Attempt,
			Duration: v.publishDur, Outcome: string(v.outcome), Status: ResponseStatus(v.err), Error: v.write.Error,
		})
	}
	if len(h.entries) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.store.RecordAttempts(ctx, h.pool, h.keep, h.entries); err != nil {
		h.log.Warn("could not record the attempt history", slog.Int("entries", len(h.entries)), slog.Any("error", err))
	}
	clear(h.entries) // let the error texts go
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
