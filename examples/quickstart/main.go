// Command quickstart is the README's Go example: it writes an event in the
// same transaction as the business change, then relays the table to a
// webhook until interrupted.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("OUTBOX_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Produce: the event commits with the business change, or neither does.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	// ... your business change in tx, e.g. UPDATE orders SET status = 'paid' ...
	if _, err := outbox.Enqueue(ctx, tx, outbox.NewMessage{
		AggregateType: "order", AggregateID: "42", EventType: "OrderPaid",
		Payload: map[string]any{"order_id": 42, "amount": 1999},
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// Relay: a sink, and a dispatcher in front of it. Run as many
	// dispatchers as you like, on as many machines: leases keep them apart.
	sink, err := httpsink.New(os.Getenv("WEBHOOK"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{Table: "outbox", Workers: 10, Lease: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Run(ctx); err != nil { // until Ctrl-C, then a graceful shutdown
		log.Fatal(err)
	}
}
