package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/inbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// natsURL is the JetStream server the tests need; they fail without it.
func natsURL() string {
	if u := os.Getenv("OUTBOX_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

type testBundle struct {
	pool    *pgxpool.Pool
	js      jetstream.JetStream
	stream  string
	subject string
	cons    jetstream.Consumer
	c       *Consumer
}

// setup gives the test its own schema (through the pool's search_path) and
// its own stream with one durable consumer, deleted at the end.
func setup(t *testing.T) *testBundle {
	t.Helper()
	schema := testdb.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ib, err := inbox.New("")
	require.NoError(t, err)
	c := NewConsumer(pool, ib, "nats-consumer", slog.New(slog.DiscardHandler))
	c.NakDelay = 0
	require.NoError(t, c.Setup(t.Context()))

	nc, err := nats.Connect(natsURL(), nats.Timeout(5*time.Second))
	require.NoError(t, err, "these tests need NATS JetStream at %s", natsURL())
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	stream := "INBOX_EXAMPLE_" + strings.ToUpper(suffix)
	subject := "inboxexample." + suffix + ".orders"
	// Memory storage: these tests are about the consumer, and a file store
	// adds a failure (creating its directory on a busy disk) that is the
	// server's, not the example's.
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, stream); err != nil {
			t.Errorf("deleting stream %s: %v", stream, err)
		}
	})
	cons, err := js.CreateOrUpdateConsumer(t.Context(), stream, jetstream.ConsumerConfig{
		Durable: "orders-applier", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	require.NoError(t, err)
	return &testBundle{pool: pool, js: js, stream: stream, subject: subject, cons: cons, c: c}
}

// publish sends one message with the given headers and checks that
// JetStream stored it (did not drop it as a duplicate).
func (b *testBundle) publish(t *testing.T, header nats.Header, data string, opts ...jetstream.PublishOpt) {
	t.Helper()
	msg := &nats.Msg{Subject: b.subject, Header: header, Data: []byte(data)}
	ack, err := b.js.PublishMsg(t.Context(), msg, opts...)
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
}

func orderHeader(key, id string) nats.Header {
	h := nats.Header{}
	if id != "" {
		h.Set(key, id)
	}
	h.Set("Outbox-Event-Type", "OrderPlaced")
	h.Set("Outbox-Aggregate-Id", "order-"+id)
	return h
}

// fetch takes the next message from the consumer.
func (b *testBundle) fetch(t *testing.T) jetstream.Msg {
	t.Helper()
	batch, err := b.cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, msgs, 1)
	return msgs[0]
}

// applied returns how many orders_applied rows each message id has.
func (b *testBundle) applied(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT message_id, count(*)::int FROM orders_applied GROUP BY 1")
	require.NoError(t, err)
	out := map[string]int{}
	var id string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
	require.NoError(t, err)
	return out
}

// requireSettled waits until the consumer has delivered n times and
// acknowledged (or terminated) every delivery.
func (b *testBundle) requireSettled(t *testing.T, n uint64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := b.cons.Info(t.Context())
		require.NoError(c, err)
		require.Equal(c, n, info.Delivered.Consumer, "deliveries")
		require.Zero(c, info.NumAckPending, "deliveries awaiting an ack")
		require.Zero(c, info.NumPending, "messages not yet delivered")
	}, 10*time.Second, 10*time.Millisecond)
}

// TestRedeliveredWithoutBrokerDedupe publishes the same outbox id twice in a
// way JetStream cannot deduplicate (no Nats-Msg-Id, as after its window has
// passed), and runs the consumer loop over both: one applies, one is a
// duplicate, both are acked.
func TestRedeliveredWithoutBrokerDedupe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, orderHeader("Outbox-Id", "1"), `{"order_id":"order-1"}`)
	b.publish(t, orderHeader("Outbox-Id", "1"), `{"order_id":"order-1"}`)
	b.publish(t, orderHeader("Outbox-Id", "2"), `{"order_id":"order-2"}`)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.c.Run(ctx, b.cons) }()
	b.requireSettled(t, 3)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}

	require.Equal(t, map[string]int{"1": 1, "2": 1}, b.applied(t))
}

// TestRedeliveredAfterLostAck is JetStream's own redelivery: the consumer
// commits, but its ack never arrives (a crash between commit and ack looks
// the same, only after the ack wait), so the same Nats-Msg-Id comes back.
func TestRedeliveredAfterLostAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, orderHeader("Nats-Msg-Id", "7"), `{"order_id":"order-7"}`, jetstream.WithMsgID("7"))
	// JetStream's own dedupe only covers a second publish within its
	// window; it cannot help with redelivery.
	ack, err := b.js.PublishMsg(t.Context(),
		&nats.Msg{Subject: b.subject, Header: orderHeader("Nats-Msg-Id", "7"), Data: []byte(`{}`)}, jetstream.WithMsgID("7"))
	require.NoError(t, err)
	require.True(t, ack.Duplicate)

	first := b.fetch(t)
	applied, err := b.c.Apply(t.Context(), first)
	require.NoError(t, err)
	require.True(t, applied)
	require.NoError(t, first.Nak()) // the lost ack: redeliver now

	second := b.fetch(t)
	meta, err := second.Metadata()
	require.NoError(t, err)
	require.Equal(t, uint64(2), meta.NumDelivered)
	require.Equal(t, "7", second.Headers().Get("Nats-Msg-Id"))
	applied, err = b.c.Handle(t.Context(), second)
	require.NoError(t, err)
	require.False(t, applied, "the redelivery is a duplicate")

	b.requireSettled(t, 2)
	require.Equal(t, map[string]int{"7": 1}, b.applied(t))
	var typ, order string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT event_type, order_id FROM orders_applied").Scan(&typ, &order))
	require.Equal(t, "OrderPlaced", typ)
	require.Equal(t, "order-7", order)
}

// TestFailedApplyIsRedelivered: a transaction that fails leaves no inbox
// record, and the nak brings the message back to be applied.
func TestFailedApplyIsRedelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, orderHeader("Nats-Msg-Id", "3"), `{}`, jetstream.WithMsgID("3"))
	_, err := b.pool.Exec(t.Context(), "ALTER TABLE orders_applied RENAME TO orders_away")
	require.NoError(t, err)
	applied, err := b.c.Handle(t.Context(), b.fetch(t))
	require.Error(t, err)
	require.False(t, applied)
	var recorded int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_inbox").Scan(&recorded))
	require.Zero(t, recorded)

	_, err = b.pool.Exec(t.Context(), "ALTER TABLE orders_away RENAME TO orders_applied")
	require.NoError(t, err)
	applied, err = b.c.Handle(t.Context(), b.fetch(t))
	require.NoError(t, err)
	require.True(t, applied)
	b.requireSettled(t, 2)
	require.Equal(t, map[string]int{"3": 1}, b.applied(t))
}

// TestPoisonIsTerminated: a message without an id, or with a payload that
// is not JSON, can never apply, so it is terminated rather than redelivered
// forever.
func TestPoisonIsTerminated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, orderHeader("", ""), `{}`)
	b.publish(t, orderHeader("Outbox-Id", "4"), `not json`)
	for range 2 {
		applied, err := b.c.Handle(t.Context(), b.fetch(t))
		require.ErrorIs(t, err, errPoison)
		require.False(t, applied)
	}
	b.requireSettled(t, 2)
	require.Empty(t, b.applied(t))
}
