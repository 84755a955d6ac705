// Command webhook-receiver is an example receiver of outboxd's HTTP sink. It
// applies each order event once to its own PostgreSQL table, using
// the inbox package to recognise redeliveries by their Idempotency-Key.
//
//	webhook-receiver -listen 127.0.0.1:8080 -dsn postgres://localhost/shop
//	outboxd run --sink http://127.0.0.1:8080/orders
//
// See examples/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/inbox"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve the webhook on")
	dsn := flag.String("dsn", "", "PostgreSQL connection string (default $OUTBOX_DSN, else the libpq environment)")
	table := flag.String("inbox-table", inbox.TableDefault, "inbox table, NAME or SCHEMA.NAME")
	consumer := flag.String("consumer", "webhook-receiver", "this receiver's name in the inbox")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, log, *listen, *dsn, *table, *consumer); err != nil {
		log.Error("webhook-receiver failed", slog.Any("error", err))
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, listen, dsn, table, consumer string) error {
	if dsn == "" {
		dsn = os.Getenv("OUTBOX_DSN")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	ib, err := inbox.New(table)
	if err != nil {
		return err
	}
	rc := NewReceiver(pool, ib, consumer, log)
	if err := rc.Setup(ctx); err != nil {
		return fmt.Errorf("creating tables: %w", err)
	}

	srv := &http.Server{
		Addr:              listen,
		Handler:           rc,
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Info("webhook-receiver listening", slog.String("listen", listen), slog.String("consumer", consumer))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Requests in flight finish and commit; one cut off mid-transaction
	// rolls back, and outboxd delivers it again.
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
