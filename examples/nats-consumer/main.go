// Command nats-consumer is an example JetStream consumer of the messages
// outboxd's NATS sink publishes. It applies each order event once to
// its own PostgreSQL table, using the inbox package to recognise
// redeliveries by their Nats-Msg-Id, and acknowledges only after the commit.
//
//	nats-consumer -nats nats://127.0.0.1:4222 -dsn postgres://localhost/shop
//	outboxd run --sink nats://127.0.0.1:4222
//
// See examples/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outbox/inbox"
)

type options struct {
	ackWait  time.Duration
	consumer string
	dsn      string
	durable  string
	natsURL  string
	stream   string
	subjects string
	table    string
}

func main() {
	var o options
	flag.StringVar(&o.natsURL, "nats", nats.DefaultURL, "NATS server URL")
	flag.StringVar(&o.stream, "stream", "OUTBOX", "JetStream stream to consume (created if missing)")
	// outbox.> takes the NATS sink's default subject,
	// outbox.{aggregate_type}.{event_type}.
	flag.StringVar(&o.subjects, "subjects", "outbox.>", "comma-separated subjects of the stream, when this creates it")
	flag.StringVar(&o.durable, "durable", "orders-applier", "durable JetStream consumer name")
	flag.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "how long JetStream waits for an ack before redelivering")
	flag.StringVar(&o.dsn, "dsn", "", "PostgreSQL connection string (default $OUTBOX_DSN, else the libpq environment)")
	flag.StringVar(&o.table, "inbox-table", inbox.TableDefault, "inbox table, NAME or SCHEMA.NAME")
	flag.StringVar(&o.consumer, "consumer", "nats-consumer", "this consumer's name in the inbox")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, log, o); err != nil {
		log.Error("nats-consumer failed", slog.Any("error", err))
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	if o.dsn == "" {
		o.dsn = os.Getenv("OUTBOX_DSN")
	}
	pool, err := pgxpool.New(ctx, o.dsn)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	ib, err := inbox.New(o.table)
	if err != nil {
		return err
	}
	c := NewConsumer(pool, ib, o.consumer, log)
	if err := c.Setup(ctx); err != nil {
		return fmt.Errorf("creating tables: %w", err)
	}

	nc, err := nats.Connect(o.natsURL, nats.Name("outboxd-example-nats-consumer"))
	if err != nil {
		return fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: o.stream, Subjects: strings.Split(o.subjects, ",")})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("creating stream %s: %w", o.stream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.stream, jetstream.ConsumerConfig{
		Durable:   o.durable,
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   o.ackWait,
	})
	if err != nil {
		return fmt.Errorf("creating consumer %s: %w", o.durable, err)
	}
	log.Info("nats-consumer running", slog.String("stream", o.stream), slog.String("durable", o.durable),
		slog.String("consumer", o.consumer))
	return c.Run(ctx, cons)
}
