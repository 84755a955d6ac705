package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outbox/inbox"
)

// Headers outboxd's NATS sink sets. Nats-Msg-Id, JetStream's own
// deduplication key, holds the message's identity; Outbox-Id repeats it, and is the
// key for a publisher that sets no Nats-Msg-Id.
const (
	headerMsgID       = "Nats-Msg-Id"
	headerOutboxID    = "Outbox-Id"
	headerEventType   = "Outbox-Event-Type"
	headerAggregateID = "Outbox-Aggregate-Id"
)

// handleTimeout bounds one message's transaction and ack, inside the
// default ack wait, so a stuck database does not hold a message past it.
const handleTimeout = 10 * time.Second

// createOrdersApplied is the consumer's own business table. It has no
// unique key on message_id on purpose: the inbox, not this table, keeps a
// message from being applied twice, as it must for the many business changes
// that have no natural key to deduplicate on.
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

// errPoison marks a message that no redelivery can apply.
var errPoison = errors.New("message can never be applied")

// Consumer applies JetStream messages to PostgreSQL once each. JetStream
// redelivers any message whose ack it did not get (a crash after the commit,
// a lost ack, an ack wait that ran out), and JetStream's own deduplication
// covers only publishes within its window; the inbox absorbs the rest.
type Consumer struct {
	// NakDelay is how long JetStream waits before redelivering a message
	// whose transaction failed. Defaults to 1s.
	NakDelay time.Duration

	inbox *inbox.Inbox
	log   *slog.Logger
	name  string
	pool  *pgxpool.Pool
}

// NewConsumer returns a consumer that records its messages as name in ib.
func NewConsumer(pool *pgxpool.Pool, ib *inbox.Inbox, name string, log *slog.Logger) *Consumer {
	return &Consumer{NakDelay: time.Second, inbox: ib, log: log, name: name, pool: pool}
}

// Setup creates the inbox and the business table if they do not exist.
func (c *Consumer) Setup(ctx context.Context) error {
	if err := c.inbox.Migrate(ctx, c.pool); err != nil {
		return err
	}
	_, err := c.pool.Exec(ctx, createOrdersApplied)
	return err
}

// Run consumes from cons until ctx is done, handling one message at a time.
// On return, the message being handled has been finished and acknowledged;
// messages fetched but not yet handled are redelivered by JetStream after
// its ack wait.
func (c *Consumer) Run(ctx context.Context, cons jetstream.Consumer) error {
	// A message in flight when ctx ends still commits and acks: cutting it
	// off would only cost a redelivery.
	work := context.WithoutCancel(ctx)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		hctx, cancel := context.WithTimeout(work, handleTimeout)
		defer cancel()
		_, _ = c.Handle(hctx, msg)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		c.log.WarnContext(ctx, "consuming from JetStream", slog.Any("error", err))
	}))
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}

// Handle applies msg and then settles it with JetStream: an ack once the
// transaction has committed (for a duplicate too: it is a success), a
// delayed nak when the transaction failed, a term when the message can
// never apply. It reports whether this delivery applied the message.
func (c *Consumer) Handle(ctx context.Context, msg jetstream.Msg) (applied bool, err error) {
	applied, err = c.Apply(ctx, msg)
	switch {
	case errors.Is(err, errPoison):
		c.log.ErrorContext(ctx, "terminating a message that can never apply", slog.Any("error", err))
		// Plain Term, not TermWithReason: servers before 2.10.4 ignore a
		// term that carries a reason, and would redeliver the message.
		if tErr := msg.Term(); tErr != nil {
			return false, errors.Join(err, tErr)
		}
		return false, err
	case err != nil:
		c.log.WarnContext(ctx, "applying message failed; JetStream will redeliver it", slog.Any("error", err))
		if nErr := msg.NakWithDelay(c.NakDelay); nErr != nil {
			return false, errors.Join(err, nErr)
		}
		return false, err
	}
	// Acknowledge only after the commit. If this ack is lost, JetStream
	// redelivers and Apply reports the duplicate.
	if err := msg.DoubleAck(ctx); err != nil {
		c.log.WarnContext(ctx, "ack not confirmed; the message will come back as a duplicate", slog.Any("error", err))
		return applied, fmt.Errorf("ack: %w", err)
	}
	c.log.InfoContext(ctx, "message received", slog.String("message_id", messageID(msg)), slog.Bool("applied", applied))
	return applied, nil
}

// Apply records msg in the inbox and makes the business change, in one
// committed transaction, unless the message was applied before. It does not
// settle the message with JetStream.
func (c *Consumer) Apply(ctx context.Context, msg jetstream.Msg) (applied bool, err error) {
	id := messageID(msg)
	if id == "" {
		return false, fmt.Errorf("%w: no %s or %s header", errPoison, headerMsgID, headerOutboxID)
	}
	payload := msg.Data()
	if !json.Valid(payload) {
		return false, fmt.Errorf("%w: message %s: payload is not JSON", errPoison, id)
	}
	h := msg.Headers()
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		applied, err = c.inbox.Apply(ctx, tx, c.name, id, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insertOrderApplied, id, h.Get(headerEventType), h.Get(headerAggregateID), payload)
			return err
		})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("message %s: %w", id, err)
	}
	return applied, nil
}

// messageID is the identity of msg: JetStream's dedupe id, or the
// Outbox-Id header when the publisher set no dedupe id.
func messageID(msg jetstream.Msg) string {
	h := msg.Headers()
	if id := h.Get(headerMsgID); id != "" {
		return id
	}
	return h.Get(headerOutboxID)
}
