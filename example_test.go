package outbox_test

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
)

// A producer writes messages in its own transaction, with the business
// change they announce; a dispatcher relays them to a sink.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("OUTBOX_TEST_DSN"),
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// A schema of its own, so the example leaves nothing behind.
	schema := fmt.Sprintf("outbox_example_%d", os.Getpid())
	table := schema + ".outbox"
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		log.Fatal(err)
	}
	if err := admin.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck // best effort

	// Producer: the messages commit or roll back with the business change.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// ... INSERT INTO orders ... in tx ...
	_, err = outbox.Producer{Table: table}.Enqueue(ctx, tx,
		outbox.NewMessage{AggregateType: "order", AggregateID: "42", EventType: "OrderCreated", Payload: map[string]int{"total": 1200}},
		outbox.NewMessage{AggregateType: "order", AggregateID: "42", EventType: "OrderPaid", Payload: map[string]int{"amount": 1200}},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// Dispatcher: Drain delivers everything pending, then returns.
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		fmt.Printf("%s %s/%s %s\n", m.EventType, m.AggregateType, m.AggregateID, m.Payload)
		return nil
	})
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{
		Table:   table,
		Workers: 1, // one worker publishes in id order, which keeps the output stable
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// OrderCreated order/42 {"total": 1200}
	// OrderPaid order/42 {"amount": 1200}
}
