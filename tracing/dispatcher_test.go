package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/tracing"
)

// webhook is an HTTP receiver that fails its first failFirst requests with
// 503 and records the headers of every request.
type webhook struct {
	mu        sync.Mutex
	headers   []http.Header
	failFirst int
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.mu.Lock()
	w.headers = append(w.headers, r.Header.Clone())
	fail := len(w.headers) <= w.failFirst
	w.mu.Unlock()
	if fail {
		rw.WriteHeader(http.StatusServiceUnavailable)
	}
}

func (w *webhook) requests() []http.Header {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]http.Header(nil), w.headers...)
}

// TestDispatcherCarriesTheTraceToTheWebhook runs the whole path: a traced
// producer enqueues in its transaction, a real dispatcher relays through a
// traced HTTP sink, and the receiver gets a traceparent continuing the
// producer's trace, once per attempt.
func TestDispatcherCarriesTheTraceToTheWebhook(t *testing.T) {
	t.Parallel()

	b := setup(t)
	pool := testdb.Pool(t)
	table := testdb.NewSchema(t) + ".outbox"
	admin, err := outbox.NewAdmin(pool, table)
	require.NoError(t, err)
	require.NoError(t, admin.Migrate(t.Context()))

	// The producer: a business transaction inside a span.
	ctx, producer := b.tp.Tracer("producer").Start(t.Context(), "place order")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	headers := tracing.Headers(ctx)
	headers["x-correlation-id"] = "c-42"
	ids, err := outbox.Producer{Table: table}.Enqueue(ctx, tx, outbox.NewMessage{
		AggregateType: "order", AggregateID: "42", EventType: "OrderPlaced",
		Payload: map[string]int{"total": 10}, Headers: headers,
	})
	require.NoError(t, err)
	var uid string
	require.NoError(t, tx.QueryRow(ctx, "SELECT uid::text FROM "+table+" WHERE id = $1", ids[0]).Scan(&uid))
	require.NoError(t, tx.Commit(ctx))
	producer.End()

	// The relay: the first delivery fails, so the trace shows both attempts.
	hook := &webhook{failFirst: 1}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	hs, err := httpsink.New(srv.URL+"/hooks/orders", nil)
	require.NoError(t, err)
	sink := tracing.WrapSink(hs, &tracing.Options{
		TracerProvider: b.tp,
		System:         tracing.SystemForScheme("http"),
		Destination:    func(*outbox.Message) string { return "/hooks/orders" },
	})
	t.Cleanup(func() { require.NoError(t, sink.Close()) })
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{
		Table:        table,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		PollInterval: 20 * time.Millisecond,
		RetryBase:    time.Millisecond,
		RetryCap:     5 * time.Millisecond,
	})
	require.NoError(t, err)
	drainCtx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, d.Drain(drainCtx))

	reqs := hook.requests()
	require.Len(t, reqs, 2)
	spans := b.sendSpans()
	require.Len(t, spans, 2)
	spanByAttempt := map[int64]int{}
	for i, s := range spans {
		spanByAttempt[attrs(s)["outbox.attempt"].AsInt64()] = i
	}
	for attempt, req := range reqs {
		send := spans[spanByAttempt[int64(attempt+1)]]
		require.Equal(t, "send /hooks/orders", send.Name())
		require.Equal(t, producer.SpanContext().TraceID(), send.SpanContext().TraceID())
		require.Equal(t, producer.SpanContext().SpanID(), send.Parent().SpanID())
		a := attrs(send)
		require.Equal(t, attribute.StringValue("webhook"), a["messaging.system"])
		require.Equal(t, attribute.StringValue(uid), a["messaging.message.id"], "the message's identity")
		require.Equal(t, attribute.Int64Value(ids[0]), a["outbox.row_id"])
		require.Positive(t, a["outbox.fencing_token"].AsInt64())

		// What the receiver saw continues the trace under this attempt's span.
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(req)))
		require.True(t, sc.IsValid(), "attempt %d: no traceparent in %v", attempt+1, req)
		require.Equal(t, producer.SpanContext().TraceID(), sc.TraceID())
		require.Equal(t, send.SpanContext().SpanID(), sc.SpanID())
		require.Equal(t, "c-42", req.Get("X-Correlation-Id"))
		require.Equal(t, uid, req.Get("Idempotency-Key"))
	}
	first, second := spans[spanByAttempt[1]], spans[spanByAttempt[2]]
	require.Equal(t, codes.Error, first.Status().Code)
	require.Equal(t, attribute.StringValue(tracing.ErrorRetryable), attrs(first)["error.type"])
	require.Equal(t, codes.Unset, second.Status().Code)
}
