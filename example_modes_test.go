package outbox_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
)

// exampleTable migrates a table in a schema of its own and returns the
// pool, the table's name and what drops the schema.
func exampleTable(ctx context.Context, name string) (*pgxpool.Pool, string, func()) {
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("OUTBOX_TEST_DSN"),
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	schema := fmt.Sprintf("outbox_example_%s_%d", name, os.Getpid())
	table := schema + ".outbox"
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		log.Fatal(err)
	}
	if err := admin.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return pool, table, func() {
		pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck // best effort
		pool.Close()
	}
}

// enqueue commits msgs in one transaction.
func enqueue(ctx context.Context, pool *pgxpool.Pool, table string, msgs ...outbox.NewMessage) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := (outbox.Producer{Table: table}).Enqueue(ctx, tx, msgs...); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// With Ordered, each aggregate's messages go out in id order: while the
// first message of order 42 waits for its retry, the second waits behind
// it, and other aggregates are not held back.
func ExampleConfig_ordered() {
	ctx := context.Background()
	pool, table, drop := exampleTable(ctx, "ordered")
	defer drop()
	enqueue(ctx, pool, table,
		outbox.NewMessage{AggregateType: "order", AggregateID: "42", EventType: "OrderCreated", Payload: 1},
		outbox.NewMessage{AggregateType: "order", AggregateID: "42", EventType: "OrderPaid", Payload: 2},
	)

	var mu sync.Mutex
	var lines []string
	failedOnce := false
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !failedOnce {
			failedOnce = true
			lines = append(lines, fmt.Sprintf("%s attempt %d: refused", m.EventType, m.Attempt))
			return errors.New("receiver answered 503")
		}
		lines = append(lines, fmt.Sprintf("%s attempt %d: delivered", m.EventType, m.Attempt))
		return nil
	})
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{
		Table: table, Ordered: true, Workers: 4,
		RetryBase: time.Millisecond, RetryCap: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// OrderCreated attempt 1: refused
	// OrderCreated attempt 2: delivered
	// OrderPaid attempt 1: delivered
}

// Shard leases: the table is split into shards, each dispatcher holds a
// fair share of them, and each message is written once, when its outcome
// is. With Ordered, each aggregate is delivered in id order.
func ExampleAdmin_EnableShards() {
	ctx := context.Background()
	pool, table, drop := exampleTable(ctx, "shards")
	defer drop()
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		log.Fatal(err)
	}
	if err := admin.EnableShards(ctx, 8); err != nil { // outboxd migrate --shards 8
		log.Fatal(err)
	}
	for i := range 3 {
		enqueue(ctx, pool, table, outbox.NewMessage{AggregateType: "order", AggregateID: "7", EventType: fmt.Sprintf("Step%d", i+1), Payload: i})
	}

	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		fmt.Println(m.AggregateID, m.EventType)
		return nil
	})
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{
		Table: table, LeaseMode: outbox.LeaseShards, Ordered: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 7 Step1
	// 7 Step2
	// 7 Step3
}

// statusError is what a client of some receiver returns.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("receiver answered %d", e.code) }

// receiverSink is a Sink of one's own: it tells the dispatcher what each
// failure means. A permanent error sends the message to dead at once, a
// defer puts it back without spending an attempt, Unavailable pauses the
// whole sink, and any other error is retried with backoff.
type receiverSink struct {
	send func(ctx context.Context, id string, payload []byte) error
}

func (s *receiverSink) Publish(ctx context.Context, m *outbox.Message) error {
	// The id every delivery of this message carries: the receiver
	// deduplicates on it.
	err := s.send(ctx, m.IDString(), m.Payload)
	var se *statusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.code == 401:
		return outbox.Unavailable(err) // a credential problem concerns every message
	case errors.As(err, &se) && se.code == 409:
		return outbox.Defer(time.Minute, "the order it refers to does not exist yet")
	case errors.As(err, &se) && se.code >= 400 && se.code < 500:
		return outbox.Permanent(err) // retrying will not help
	}
	return err
}

func (s *receiverSink) Close() error { return nil }

// A custom Sink: the dispatcher classifies its failures by the errors it
// returns.
func ExampleSink() {
	ctx := context.Background()
	pool, table, drop := exampleTable(ctx, "sink")
	defer drop()
	enqueue(ctx, pool, table,
		outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "Good", Payload: 1},
		outbox.NewMessage{AggregateType: "order", AggregateID: "2", EventType: "Malformed", Payload: 2},
	)
	sink := &receiverSink{send: func(_ context.Context, _ string, payload []byte) error {
		if string(payload) == "2" {
			return &statusError{code: 422}
		}
		return nil
	}}
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{Table: table, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	st := d.Stats()
	fmt.Println("done:", st.Done, "dead:", st.Dead)
	// Output:
	// done: 1 dead: 1
}
