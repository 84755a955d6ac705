package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/inbox"
)

// maxBody bounds a webhook body; a larger one is answered 413, which
// outboxd treats as permanent (the message goes dead for an operator).
const maxBody = 1 << 20

// createOrdersApplied is the receiver's own business table. It has no unique
// key on message_id on purpose: the inbox, not this table, keeps a message
// from being applied twice, as it must for the many business changes that
// have no natural key to deduplicate on (a balance update, a mail queued).
const createOrdersApplied = `
CREATE TABLE IF NOT EXISTS orders_applied (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id  text NOT NULL,
    event_type  text NOT NULL,
    order_id    text NOT NULL,
    payload     jsonb NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)`

const insertOrderApplied = `
INSERT INTO orders_applied (message_id, event_type, order_id, payload) VALUES ($1, $2, $3, $4)`

// Receiver is the webhook endpoint outboxd's HTTP sink POSTs to. Each
// message is applied once, in one transaction with its inbox record; every
// delivery of an applied message, the first and the duplicates alike, is
// answered 200, because a duplicate is a success to the sender.
type Receiver struct {
	consumer string
	inbox    *inbox.Inbox
	log      *slog.Logger
	pool     *pgxpool.Pool
}

// NewReceiver returns a receiver that records its messages as consumer in ib.
func NewReceiver(pool *pgxpool.Pool, ib *inbox.Inbox, consumer string, log *slog.Logger) *Receiver {
	return &Receiver{consumer: consumer, inbox: ib, log: log, pool: pool}
}

// Setup creates the inbox and the business table if they do not exist.
func (rc *Receiver) Setup(ctx context.Context) error {
	if err := rc.inbox.Migrate(ctx, rc.pool); err != nil {
		return err
	}
	_, err := rc.pool.Exec(ctx, createOrdersApplied)
	return err
}

// event is what the receiver takes from one delivery.
type event struct {
	id      string // Idempotency-Key: the message's identity
	typ     string // ce-type: the outbox event_type
	subject string // ce-subject: the outbox aggregate_id, here the order
	payload []byte
}

// ServeHTTP answers as outboxd's HTTP sink expects: 2xx marks the message
// delivered, 4xx sends it dead (a request that can never succeed), 5xx
// makes outboxd retry it later.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	ev := event{
		id:      r.Header.Get("Idempotency-Key"),
		typ:     ceHeader(r, "Ce-Type"),
		subject: ceHeader(r, "Ce-Subject"),
	}
	if ev.id == "" {
		// Without a key a redelivery cannot be recognised, so the message
		// cannot be applied once: refuse it rather than risk twice.
		http.Error(w, "missing Idempotency-Key header", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		// A malformed body encoding. A connection that broke mid-body never
		// reads this answer: the sender retries on its transport error.
		http.Error(w, "reading body failed", http.StatusBadRequest)
		return
	}
	if !json.Valid(body) {
		http.Error(w, "body is not JSON", http.StatusBadRequest)
		return
	}
	ev.payload = body

	applied, err := rc.apply(r.Context(), ev)
	if err != nil {
		rc.log.ErrorContext(r.Context(), "applying message failed; the sender will retry",
			slog.String("message_id", ev.id), slog.Any("error", err))
		http.Error(w, "could not apply the message, retry later", http.StatusServiceUnavailable)
		return
	}
	rc.log.InfoContext(r.Context(), "message received",
		slog.String("message_id", ev.id), slog.String("event_type", ev.typ), slog.Bool("applied", applied))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"applied": applied})
}

// apply records the message in the inbox and makes the business change, in
// one transaction, unless the message was applied before. Any error rolls
// both back, so a retry starts clean.
func (rc *Receiver) apply(ctx context.Context, ev event) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, rc.pool, func(tx pgx.Tx) error {
		var err error
		applied, err = rc.inbox.Apply(ctx, tx, rc.consumer, ev.id, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insertOrderApplied, ev.id, ev.typ, ev.subject, ev.payload)
			return err
		})
		return err
	})
	return applied, err
}

// ceHeader reads a CloudEvents attribute header, which the HTTP binding
// percent-encodes.
func ceHeader(r *http.Request, name string) string {
	v := r.Header.Get(name)
	if dec, err := url.PathUnescape(v); err == nil {
		return dec
	}
	return v
}
