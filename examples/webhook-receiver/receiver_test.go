package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/inbox"
	"github.com/outboxd/outbox/internal/testdb"
	"github.com/outboxd/outbox/sink/httpsink"
)

const consumer = "webhook-receiver"

type testBundle struct {
	pool   *pgxpool.Pool
	schema string
	srv    *httptest.Server

	mu         sync.Mutex
	deliveries map[string]int // per Idempotency-Key
	statuses   map[int]int    // per response status
}

// setup starts the receiver on its own schema: the pool's search_path puts
// the example's unqualified tables (orders_applied, outbox_inbox) there.
func setup(t *testing.T) *testBundle {
	t.Helper()
	schema := testdb.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 12
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	ib, err := inbox.New("")
	require.NoError(t, err)
	rc := NewReceiver(pool, ib, consumer, quietLogger())
	require.NoError(t, rc.Setup(t.Context()))

	b := &testBundle{pool: pool, schema: schema, deliveries: map[string]int{}, statuses: map[int]int{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		rc.ServeHTTP(rec, r)
		b.mu.Lock()
		b.deliveries[r.Header.Get("Idempotency-Key")]++
		b.statuses[rec.status]++
		b.mu.Unlock()
	}))
	t.Cleanup(b.srv.Close)
	return b
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// outboxTable migrates an outbox table in the test's schema and enqueues n
// order events in one producer transaction.
// outboxTable migrates an outbox table and enqueues n messages, returning
// their identities (what the sink sends as Idempotency-Key).
func (b *testBundle) outboxTable(t *testing.T, n int) (table string, keys []string) {
	t.Helper()
	table = b.schema + ".outbox"
	admin, err := outbox.NewAdmin(b.pool, table)
	require.NoError(t, err)
	require.NoError(t, admin.Migrate(t.Context()))
	msgs := make([]outbox.NewMessage, n)
	for i := range msgs {
		order := fmt.Sprintf("order-%d", i)
		msgs[i] = outbox.NewMessage{
			AggregateType: "order", AggregateID: order, EventType: "OrderPlaced",
			Payload: map[string]any{"order_id": order, "total": 10 * (i + 1)},
		}
	}
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		ids, err := outbox.Producer{Table: table}.Enqueue(t.Context(), tx, msgs...)
		if err != nil {
			return err
		}
		rows, err := tx.Query(t.Context(), "SELECT uid::text FROM "+pgx.Identifier{b.schema, "outbox"}.Sanitize()+" WHERE id = ANY($1)", ids)
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	return table, keys
}

// drain runs one dispatcher over table until nothing is left to deliver.
func (b *testBundle) drain(t *testing.T, table string, sink outbox.Sink) {
	t.Helper()
	d, err := outbox.NewDispatcher(b.pool, sink, &outbox.Config{
		Table: table, Logger: quietLogger(), Workers: 4,
		PollInterval: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, d.Drain(ctx))
	if ctx.Err() != nil {
		admin, err := outbox.NewAdmin(b.pool, table)
		require.NoError(t, err)
		st, err := admin.Status(context.WithoutCancel(ctx))
		b.mu.Lock()
		defer b.mu.Unlock()
		t.Fatalf("the drain timed out: outbox %+v (%v), responses by status %v", st, err, b.statuses)
	}
}

func (b *testBundle) httpSink(t *testing.T) *httpsink.Sink {
	t.Helper()
	s, err := httpsink.New(b.srv.URL+"/orders", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
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

func (b *testBundle) requireStatus(t *testing.T, table string, done int64) {
	t.Helper()
	admin, err := outbox.NewAdmin(b.pool, table)
	require.NoError(t, err)
	st, err := admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": done, "dead": 0}, st.Counts)
}

func each(keys []string, n int) map[string]int {
	out := make(map[string]int, len(keys))
	for _, k := range keys {
		out[k] = n
	}
	return out
}

// post sends one webhook request as outboxd's HTTP sink would.
func (b *testBundle) post(t *testing.T, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/orders", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Ce-Type", "Order%20Placed")
	req.Header.Set("Ce-Subject", "order-1")
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(got))
}

// TestDispatcherRedelivery runs real dispatchers over real outbox rows: every
// message reaches the receiver twice, and is applied once.
func TestDispatcherRedelivery(t *testing.T) {
	t.Parallel()

	t.Run("ReplayedOutbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		table, ids := b.outboxTable(t, 5)
		sink := b.httpSink(t)

		b.drain(t, table, sink)
		b.requireStatus(t, table, 5)
		require.Equal(t, each(ids, 1), b.applied(t))

		// Put every row back as if no publish had ever been recorded: what a
		// dispatcher that published and then lost its database connection
		// leaves behind, and what an operator's replay does on purpose.
		_, err := b.pool.Exec(t.Context(), "UPDATE "+pgx.Identifier{b.schema, "outbox"}.Sanitize()+
			" SET status = 'pending', available_at = now(), done_at = NULL, lease_owner = NULL, lease_until = NULL")
		require.NoError(t, err)
		b.drain(t, table, sink)

		b.requireStatus(t, table, 5)
		b.mu.Lock()
		require.Equal(t, each(ids, 2), b.deliveries)
		require.Equal(t, map[int]int{http.StatusOK: 10}, b.statuses, "a duplicate is answered as a success")
		b.mu.Unlock()
		require.Equal(t, each(ids, 1), b.applied(t))
	})

	t.Run("LostResponses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		table, ids := b.outboxTable(t, 5)
		// The receiver commits each first delivery, but the dispatcher
		// never learns it (a timeout, a reset connection), so it retries.
		hs := b.httpSink(t)
		sink := outbox.SinkFunc(func(ctx context.Context, msg *outbox.Message) error {
			err := hs.Publish(ctx, msg)
			if err == nil && msg.Attempt == 1 {
				return outbox.Retryable(errors.New("response lost"))
			}
			return err
		})
		b.drain(t, table, sink)

		b.requireStatus(t, table, 5)
		b.mu.Lock()
		require.Equal(t, each(ids, 2), b.deliveries)
		require.Equal(t, map[int]int{http.StatusOK: 10}, b.statuses)
		b.mu.Unlock()
		require.Equal(t, each(ids, 1), b.applied(t))
	})
}

func TestReceiver(t *testing.T) {
	t.Parallel()

	t.Run("AppliesOnceAndAnswersDuplicates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		code, body := b.post(t, "7", `{"order_id":"order-1"}`)
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, `{"applied":true}`, body)
		code, body = b.post(t, "7", `{"order_id":"order-1"}`)
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, `{"applied":false}`, body)
		require.Equal(t, map[string]int{"7": 1}, b.applied(t))

		var typ, order, payload string
		require.NoError(t, b.pool.QueryRow(t.Context(),
			"SELECT event_type, order_id, payload::text FROM orders_applied").Scan(&typ, &order, &payload))
		require.Equal(t, "Order Placed", typ, "ce-type is percent-decoded")
		require.Equal(t, "order-1", order)
		require.JSONEq(t, `{"order_id":"order-1"}`, payload)
	})

	t.Run("ConcurrentDuplicates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 6
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		for range n {
			wg.Go(func() {
				code, body := b.post(t, "9", `{}`)
				mu.Lock()
				answers[fmt.Sprint(code, body)]++
				mu.Unlock()
			})
		}
		wg.Wait()
		require.Equal(t, map[string]int{
			`200{"applied":true}`:  1,
			`200{"applied":false}`: n - 1,
		}, answers)
		require.Equal(t, map[string]int{"9": 1}, b.applied(t))
	})

	t.Run("RejectsWhatCanNeverApply", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		code, _ := b.post(t, "", `{}`)
		require.Equal(t, http.StatusBadRequest, code)
		code, _ = b.post(t, "1", `not json`)
		require.Equal(t, http.StatusBadRequest, code)
		code, _ = b.post(t, "2", `"`+strings.Repeat("x", maxBody)+`"`)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)

		resp, err := b.srv.Client().Get(b.srv.URL + "/orders")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

		require.Empty(t, b.applied(t))
		var recorded int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_inbox").Scan(&recorded))
		require.Zero(t, recorded)
	})

	t.Run("FailedApplyIsRetriable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(t.Context(), "ALTER TABLE orders_applied RENAME TO orders_away")
		require.NoError(t, err)
		code, _ := b.post(t, "5", `{}`)
		require.Equal(t, http.StatusServiceUnavailable, code, "5xx: the sender retries")
		var recorded int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_inbox").Scan(&recorded))
		require.Zero(t, recorded, "the failed business change took the inbox record with it")

		_, err = b.pool.Exec(t.Context(), "ALTER TABLE orders_away RENAME TO orders_applied")
		require.NoError(t, err)
		code, body := b.post(t, "5", `{}`)
		require.Equal(t, http.StatusOK, code)
		var got map[string]bool
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.True(t, got["applied"])
		require.Equal(t, map[string]int{"5": 1}, b.applied(t))
	})
}
