package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/tracing"
)

// testBundle is one test's tracer provider, recording every span.
type testBundle struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return &testBundle{rec: rec, tp: tp}
}

// producerSpan starts and ends a span standing for the producer's business
// transaction, with baggage, and returns the headers it would store.
func (b *testBundle) producerSpan(t *testing.T) (trace.SpanContext, map[string]string) {
	t.Helper()
	member, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	ctx := baggage.ContextWithBaggage(context.Background(), bag)
	ctx, span := b.tp.Tracer("producer").Start(ctx, "checkout")
	defer span.End()
	return span.SpanContext(), tracing.Headers(ctx)
}

// sendSpans returns the ended spans named like a send.
func (b *testBundle) sendSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.rec.Ended() {
		if s.InstrumentationScope().Name == tracing.ScopeName {
			out = append(out, s)
		}
	}
	return out
}

// received is what the wrapped sink was given.
type received struct {
	msg  *outbox.Message
	span trace.SpanContext
}

// recordingSink captures every publish and returns err.
type recordingSink struct {
	mu     sync.Mutex
	got    []received
	err    error
	closed int
}

func (r *recordingSink) Publish(ctx context.Context, msg *outbox.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, received{msg: msg, span: trace.SpanContextFromContext(ctx)})
	return r.err
}

func (r *recordingSink) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed++
	return nil
}

func (r *recordingSink) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func testMessage(id int64, headers map[string]string) *outbox.Message {
	return &outbox.Message{
		ID:            id,
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "OrderCreated",
		Payload:       []byte(`{"total":10}`),
		CreatedAt:     time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC),
		Attempt:       3,
		FencingToken:  17,
		Headers:       headers,
	}
}

// parseTraceparent reads the span context the headers carry.
func parseTraceparent(t *testing.T, h map[string]string) trace.SpanContext {
	t.Helper()
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h)))
	require.True(t, sc.IsValid(), "no valid traceparent in %v", h)
	return sc
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestWrapSinkContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()

	b := setup(t)
	producer, headers := b.producerSpan(t)
	headers["x-correlation-id"] = "c-1"
	before := maps.Clone(headers)
	inner := &recordingSink{}
	s := tracing.WrapSink(inner, &tracing.Options{
		TracerProvider: b.tp,
		System:         "kafka",
		Destination:    func(m *outbox.Message) string { return "shop." + m.AggregateType },
	})
	msg := testMessage(7, headers)
	msg.UID = "0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21"

	require.NoError(t, s.Publish(context.Background(), msg))

	spans := b.sendSpans()
	require.Len(t, spans, 1)
	send := spans[0]
	require.Equal(t, "send shop.order", send.Name())
	require.Equal(t, trace.SpanKindProducer, send.SpanKind())
	require.Equal(t, producer.TraceID(), send.SpanContext().TraceID())
	require.Equal(t, producer.SpanID(), send.Parent().SpanID(), "the send span is not the producer span's child")
	require.True(t, send.Parent().IsRemote())
	require.Equal(t, codes.Unset, send.Status().Code)
	require.Equal(t, map[attribute.Key]attribute.Value{
		"messaging.system":            attribute.StringValue("kafka"),
		"messaging.operation.type":    attribute.StringValue("send"),
		"messaging.operation.name":    attribute.StringValue("send"),
		"messaging.message.id":        attribute.StringValue("0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21"),
		"messaging.message.body.size": attribute.IntValue(len(msg.Payload)),
		"messaging.destination.name":  attribute.StringValue("shop.order"),
		"outbox.row_id":               attribute.Int64Value(7),
		"outbox.event_type":           attribute.StringValue("OrderCreated"),
		"outbox.aggregate_type":       attribute.StringValue("order"),
		"outbox.aggregate_id":         attribute.StringValue("42"),
		"outbox.attempt":              attribute.IntValue(3),
		"outbox.fencing_token":        attribute.Int64Value(17),
	}, attrs(send))

	got := inner.received()
	require.Len(t, got, 1)
	// The destination continues the trace under the send span.
	passed := parseTraceparent(t, got[0].msg.Headers)
	require.Equal(t, producer.TraceID(), passed.TraceID())
	require.Equal(t, send.SpanContext().SpanID(), passed.SpanID())
	require.Equal(t, "tenant=acme", got[0].msg.Headers["baggage"])
	require.Equal(t, "c-1", got[0].msg.Headers["x-correlation-id"])
	require.Len(t, got[0].msg.Headers, len(before))
	// Instrumentation inside the sink nests under the send span too.
	require.Equal(t, send.SpanContext().SpanID(), got[0].span.SpanID())

	// The caller's message and map are untouched; the sink got a copy.
	require.Equal(t, before, msg.Headers)
	require.NotSame(t, msg, got[0].msg)
	want := *msg
	want.Headers = got[0].msg.Headers
	require.Equal(t, want, *got[0].msg)
}

func TestWrapSinkWithoutHeadersStartsANewTrace(t *testing.T) {
	t.Parallel()

	b := setup(t)
	inner := &recordingSink{}
	s := tracing.WrapSink(inner, &tracing.Options{TracerProvider: b.tp})
	// A span and baggage around the relay itself must not adopt messages.
	member, err := baggage.NewMember("relay", "x")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	ctx, relay := b.tp.Tracer("relay").Start(baggage.ContextWithBaggage(context.Background(), bag), "run")
	defer relay.End()

	for i, headers := range []map[string]string{nil, {}, {"x-other": "1"}} {
		require.NoError(t, s.Publish(ctx, testMessage(int64(i+1), headers)))
	}

	spans := b.sendSpans()
	require.Len(t, spans, 3)
	got := inner.received()
	traces := map[trace.TraceID]bool{}
	for i, send := range spans {
		require.Equal(t, "send", send.Name())
		require.False(t, send.Parent().IsValid(), "span %d has a parent", i)
		require.NotEqual(t, relay.SpanContext().TraceID(), send.SpanContext().TraceID())
		traces[send.SpanContext().TraceID()] = true
		a := attrs(send)
		require.NotContains(t, a, attribute.Key("messaging.system"))
		require.NotContains(t, a, attribute.Key("messaging.destination.name"))

		passed := parseTraceparent(t, got[i].msg.Headers)
		require.Equal(t, send.SpanContext().TraceID(), passed.TraceID())
		require.Equal(t, send.SpanContext().SpanID(), passed.SpanID())
		require.NotContains(t, got[i].msg.Headers, "baggage")
	}
	require.Len(t, traces, 3, "messages share a trace")
	require.Equal(t, "1", got[2].msg.Headers["x-other"])
}

func TestWrapSinkReplacesStaleTraceHeaders(t *testing.T) {
	t.Parallel()

	b := setup(t)
	producer, headers := b.producerSpan(t)

	t.Run("DifferentCase", func(t *testing.T) {
		t.Parallel()

		inner := &recordingSink{}
		s := tracing.WrapSink(inner, &tracing.Options{TracerProvider: b.tp})
		msg := testMessage(1, map[string]string{"Traceparent": headers["traceparent"], "BAGGAGE": headers["baggage"]})

		require.NoError(t, s.Publish(context.Background(), msg))

		got := inner.received()[0].msg.Headers
		require.Equal(t, []string{"baggage", "traceparent"}, sortedKeys(got), "a header is duplicated in another case")
		passed := parseTraceparent(t, got)
		require.Equal(t, producer.TraceID(), passed.TraceID())
		require.NotEqual(t, producer.SpanID(), passed.SpanID())
		require.Equal(t, "tenant=acme", got["baggage"])
	})
	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()

		inner := &recordingSink{}
		s := tracing.WrapSink(inner, &tracing.Options{TracerProvider: b.tp})
		msg := testMessage(2, map[string]string{"traceparent": "00-garbage", "tracestate": "k=v"})

		require.NoError(t, s.Publish(context.Background(), msg))

		got := inner.received()[0].msg.Headers
		passed := parseTraceparent(t, got)
		require.NotEqual(t, producer.TraceID(), passed.TraceID())
		require.NotContains(t, got, "tracestate", "the old tracestate was kept next to a new trace")
	})
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func TestWrapSinkMarksFailures(t *testing.T) {
	t.Parallel()

	base := errors.New("broker said no")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"Retryable", outbox.Retryable(base), tracing.ErrorRetryable},
		{"RetryableAfter", outbox.RetryableAfter(base, time.Second), tracing.ErrorRetryable},
		{"Timeout", fmt.Errorf("publishing: %w", context.DeadlineExceeded), tracing.ErrorRetryable},
		{"Cancelled", context.Canceled, tracing.ErrorRetryable},
		{"Permanent", fmt.Errorf("wrapped: %w", outbox.Permanent(base)), tracing.ErrorPermanent},
		{"Defer", outbox.Defer(time.Minute, "customer not created yet"), tracing.ErrorDefer},
		{"Unclassified", base, tracing.ErrorUnclassified},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t)
			s := tracing.WrapSink(&recordingSink{err: tt.err}, &tracing.Options{TracerProvider: b.tp})

			err := s.Publish(context.Background(), testMessage(1, nil))

			require.Equal(t, tt.err, err, "the error was not returned unchanged")
			require.Equal(t, tt.want, tracing.Classify(err))
			spans := b.sendSpans()
			require.Len(t, spans, 1)
			require.Equal(t, codes.Error, spans[0].Status().Code)
			require.Equal(t, tt.err.Error(), spans[0].Status().Description)
			require.Equal(t, attribute.StringValue(tt.want), attrs(spans[0])["error.type"])
			events := spans[0].Events()
			require.Len(t, events, 1)
			require.Equal(t, "exception", events[0].Name)
		})
	}
}

func TestWrapSinkPanicEndsTheSpan(t *testing.T) {
	t.Parallel()

	b := setup(t)
	s := tracing.WrapSink(outbox.SinkFunc(func(context.Context, *outbox.Message) error { panic("sink bug") }),
		&tracing.Options{TracerProvider: b.tp})

	require.PanicsWithValue(t, "sink bug", func() { _ = s.Publish(context.Background(), testMessage(1, nil)) })

	spans := b.sendSpans()
	require.Len(t, spans, 1)
	require.Equal(t, codes.Error, spans[0].Status().Code)
	require.Equal(t, attribute.StringValue(tracing.ErrorPanic), attrs(spans[0])["error.type"])
}

func TestWrapSinkConcurrent(t *testing.T) {
	t.Parallel()

	b := setup(t)
	inner := &recordingSink{}
	s := tracing.WrapSink(inner, &tracing.Options{TracerProvider: b.tp, System: "nats"})
	const n = 64
	producers := make([]trace.SpanContext, n)
	headers := make([]map[string]string, n)
	for i := range n {
		producers[i], headers[i] = b.producerSpan(t)
	}
	// One map shared by every publish: the race detector catches any write.
	shared := map[string]string{"x-shared": "1"}

	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() { errs <- s.Publish(context.Background(), testMessage(int64(i+1), headers[i])) })
		wg.Go(func() { errs <- s.Publish(context.Background(), testMessage(int64(n+i+1), shared)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	require.Equal(t, map[string]string{"x-shared": "1"}, shared)
	sendByID := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range b.sendSpans() {
		sendByID[attrs(sp)["messaging.message.id"].AsString()] = sp
	}
	require.Len(t, sendByID, 2*n)
	for _, r := range inner.received() {
		send := sendByID[r.msg.IDString()]
		require.NotNil(t, send)
		passed := parseTraceparent(t, r.msg.Headers)
		require.Equal(t, send.SpanContext().SpanID(), passed.SpanID())
		if r.msg.ID <= n {
			producer := producers[r.msg.ID-1]
			require.Equal(t, producer.SpanID(), send.Parent().SpanID())
			require.Equal(t, producer.TraceID(), passed.TraceID())
		} else {
			require.False(t, send.Parent().IsValid())
			require.Equal(t, "1", r.msg.Headers["x-shared"])
		}
	}
}

func TestWrapSinkClosePassesThrough(t *testing.T) {
	t.Parallel()

	inner := &recordingSink{}
	s := tracing.WrapSink(inner, nil)

	require.NoError(t, s.Close())
	require.Equal(t, 1, inner.closed)
	u, ok := s.(interface{ Unwrap() outbox.Sink })
	require.True(t, ok)
	require.Same(t, inner, u.Unwrap())
}

func TestWrapSinkOwnPropagator(t *testing.T) {
	t.Parallel()

	b := setup(t)
	producer, headers := b.producerSpan(t)
	inner := &recordingSink{}
	// Trace context only: baggage is neither read nor written, so the
	// producer's stays as it was.
	s := tracing.WrapSink(inner, &tracing.Options{TracerProvider: b.tp, Propagator: propagation.TraceContext{}})

	require.NoError(t, s.Publish(context.Background(), testMessage(1, headers)))

	got := inner.received()[0].msg.Headers
	require.Equal(t, producer.TraceID(), parseTraceparent(t, got).TraceID())
	require.Equal(t, headers["baggage"], got["baggage"])
}

func TestHeaders(t *testing.T) {
	t.Parallel()

	t.Run("NoSpan", func(t *testing.T) {
		t.Parallel()

		require.Nil(t, tracing.Headers(context.Background()))
		bag, err := baggage.Parse("tenant=acme")
		require.NoError(t, err)
		require.Nil(t, tracing.Headers(baggage.ContextWithBaggage(context.Background(), bag)))
	})
	t.Run("W3CByDefault", func(t *testing.T) {
		t.Parallel()

		b := setup(t)
		producer, h := b.producerSpan(t)
		require.Equal(t, []string{"baggage", "traceparent"}, sortedKeys(h))
		require.Equal(t, fmt.Sprintf("00-%s-%s-01", producer.TraceID(), producer.SpanID()), h["traceparent"])
		require.Equal(t, "tenant=acme", h["baggage"])
	})
	t.Run("TraceState", func(t *testing.T) {
		t.Parallel()

		ts, err := trace.ParseTraceState("vendor=abc")
		require.NoError(t, err)
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{1},
			SpanID:     trace.SpanID{2},
			TraceState: ts,
		})
		h := tracing.Headers(trace.ContextWithSpanContext(context.Background(), sc))
		require.Equal(t, map[string]string{
			"traceparent": "00-01000000000000000000000000000000-0200000000000000-00",
			"tracestate":  "vendor=abc",
		}, h)
	})
	t.Run("GivenPropagator", func(t *testing.T) {
		t.Parallel()

		b := setup(t)
		ctx, span := b.tp.Tracer("producer").Start(context.Background(), "x")
		defer span.End()
		require.Nil(t, tracing.HeadersWith(ctx, propagation.Baggage{}), "no baggage, so nothing to store")
		require.Equal(t, []string{"traceparent"}, sortedKeys(tracing.HeadersWith(ctx, propagation.TraceContext{})))
	})
}

func TestSystemForScheme(t *testing.T) {
	t.Parallel()

	for scheme, want := range map[string]string{
		"http": "webhook", "https": "webhook", "amqp": "rabbitmq", "amqps": "rabbitmq",
		"kafka": "kafka", "nats": "nats", "redis": "redis", "rediss": "redis",
		"mqtt": "mqtt", "mqtts": "mqtt", "stdout": "stdout",
	} {
		require.Equal(t, want, tracing.SystemForScheme(scheme), scheme)
	}
}
