package tracing

import (
	"context"
	"errors"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outbox"
)

// ScopeName is the instrumentation scope of the spans [WrapSink] creates.
const ScopeName = "github.com/outboxd/outbox/tracing"

// Attribute keys of the outbox's own span attributes.
const (
	AttrEventType     = attribute.Key("outbox.event_type")
	AttrAggregateType = attribute.Key("outbox.aggregate_type")
	AttrAggregateID   = attribute.Key("outbox.aggregate_id")
	AttrAttempt       = attribute.Key("outbox.attempt")
	AttrFencingToken  = attribute.Key("outbox.fencing_token")
	// AttrRowID is the row's id in the outbox table; messaging.message.id
	// is the message's identity.
	AttrRowID = attribute.Key("outbox.row_id")
)

// Values of error.type on a failed send span: how the dispatcher treats the
// error, the one classification every sink shares (see [outbox.Sink]).
const (
	// ErrorDefer is an [outbox.Defer]: pending again, attempt refunded.
	ErrorDefer = "defer"
	// ErrorPermanent is an [outbox.Permanent]: the message goes dead.
	ErrorPermanent = "permanent"
	// ErrorRetryable is an [outbox.Retryable] or a timed-out or cancelled
	// publish: retried after a backoff.
	ErrorRetryable = "retryable"
	// ErrorUnclassified is any other error, which the dispatcher retries
	// and logs as a sink bug.
	ErrorUnclassified = "unclassified"
	// ErrorPanic is a sink panic, which sends the message dead.
	ErrorPanic = "panic"
)

// Options configures [WrapSink]. A nil *Options means all defaults.
type Options struct {
	// Destination names a message's destination (the topic, subject, queue
	// or stream it goes to) for messaging.destination.name and the span
	// name "send {destination}". Span names must have few distinct values,
	// so return a name, not something with ids in it. An empty result
	// leaves both out. Defaults to none: spans are named "send".
	Destination func(*outbox.Message) string
	// Propagator reads the producer's trace context from Message.Headers
	// and writes the span's into the headers handed to the wrapped sink.
	// Defaults to the global propagator if one is set when WrapSink is
	// called, else W3C Trace Context and Baggage, the format [Headers]
	// writes by default.
	Propagator propagation.TextMapPropagator
	// System is the messaging.system attribute: the kind of destination
	// ("kafka", "rabbitmq", "nats", "redis", "webhook"); [SystemForScheme]
	// maps a sink URL scheme to it. Defaults to none: the attribute is left
	// out.
	System string
	// TracerProvider creates the spans. Defaults to
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// WrapSink returns a sink that traces every publish to next with a span of
// kind PRODUCER, named "send" or "send {destination}".
//
// The span continues the producer's trace: its parent is the context
// extracted from msg.Headers (see [Headers]), and never a span ctx may
// carry, so a message without trace headers starts a trace of its own
// rather than joining whatever span surrounds the dispatcher. next receives
// a shallow copy of msg whose Headers are a copy of msg.Headers with the
// trace fields (traceparent, tracestate, baggage with W3C propagation)
// replaced by the span's context, so the destination's consumer continues
// the same trace; msg itself, and its map, are never modified. next's ctx
// carries the span as well, for any instrumentation inside the sink.
//
// Each attempt of a message gets its own span (outbox.attempt says which).
// An error from next is returned unchanged and marks the span: status Error,
// the error recorded as an exception event, and error.type set to its
// classification ([ErrorRetryable], [ErrorPermanent], [ErrorDefer],
// [ErrorUnclassified], or [ErrorPanic] when next panics; the panic goes on
// to the dispatcher). Close closes next.
//
// The result is safe for concurrent use if next is. It has a method
// Unwrap() outbox.Sink returning next, to reach optional methods of the
// wrapped sink.
//
// Wrapping is the whole cost of tracing: where it is off, do not wrap.
func WrapSink(next outbox.Sink, opts *Options) outbox.Sink {
	if next == nil {
		panic("tracing: WrapSink of a nil sink")
	}
	if opts == nil {
		opts = &Options{}
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := propagatorOrDefault(opts.Propagator)
	s := &tracedSink{
		next:        next,
		tracer:      tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:        prop,
		fields:      prop.Fields(),
		destination: opts.Destination,
	}
	if opts.System != "" {
		s.system = semconv.MessagingSystemKey.String(opts.System)
	}
	return s
}

type tracedSink struct {
	next        outbox.Sink
	tracer      trace.Tracer
	prop        propagation.TextMapPropagator
	fields      []string
	destination func(*outbox.Message) string
	system      attribute.KeyValue // invalid (empty key) when unset
}

func (s *tracedSink) Publish(ctx context.Context, msg *outbox.Message) error {
	// Only the producer's context is a parent: a span or baggage in ctx
	// belongs to the relay (a span around Run, say), and inheriting it
	// would pile every message ever relayed into one trace.
	parent := trace.ContextWithSpanContext(baggage.ContextWithoutBaggage(ctx), trace.SpanContext{})
	if len(msg.Headers) > 0 {
		parent = s.prop.Extract(parent, headerCarrier(msg.Headers))
	}

	name, attrs := s.spanStart(msg)
	ctx, span := s.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	returned := false
	defer func() {
		if !returned {
			// A panic on its way to the dispatcher, which sends the
			// message dead; recovering here would only lose its stack.
			span.SetStatus(codes.Error, "sink panicked")
			span.SetAttributes(semconv.ErrorTypeKey.String(ErrorPanic))
		}
		span.End()
	}()

	out := s.withSpanContext(ctx, msg)
	err := s.next.Publish(ctx, &out)
	returned = true
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(Classify(err)))
	}
	return err
}

// spanStart returns the name and attributes of msg's span.
func (s *tracedSink) spanStart(msg *outbox.Message) (string, []attribute.KeyValue) {
	var dest string
	if s.destination != nil {
		dest = s.destination(msg)
	}
	name := "send"
	attrs := make([]attribute.KeyValue, 0, 12)
	if s.system.Valid() {
		attrs = append(attrs, s.system)
	}
	attrs = append(attrs,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingMessageID(msg.IDString()),
		semconv.MessagingMessageBodySize(len(msg.Payload)),
		AttrEventType.String(msg.EventType),
		AttrAggregateType.String(msg.AggregateType),
		AttrAggregateID.String(msg.AggregateID),
		AttrAttempt.Int(msg.Attempt),
		AttrFencingToken.Int64(msg.FencingToken),
		AttrRowID.Int64(msg.ID),
	)
	if dest != "" {
		name += " " + dest
		attrs = append(attrs, semconv.MessagingDestinationName(dest))
	}
	return name, attrs
}

// withSpanContext returns a copy of msg whose headers carry ctx's span
// context. The copy drops the producer's trace fields before injecting, so
// it carries exactly this span's context: none of a malformed or
// differently-cased traceparent, or a tracestate the span lacks, is left
// behind next to the new one.
func (s *tracedSink) withSpanContext(ctx context.Context, msg *outbox.Message) outbox.Message {
	h := make(headerCarrier, len(msg.Headers)+len(s.fields))
	maps.Copy(h, msg.Headers)
	for _, f := range s.fields {
		h.del(f)
	}
	s.prop.Inject(ctx, h)
	out := *msg
	out.Headers = h
	if len(h) == 0 {
		out.Headers = nil
	}
	return out
}

func (s *tracedSink) Close() error { return s.next.Close() }

// Unwrap returns the wrapped sink.
func (s *tracedSink) Unwrap() outbox.Sink { return s.next }

// Classify names how the dispatcher treats a publish error, the value of
// error.type on a failed span: [ErrorDefer], [ErrorPermanent],
// [ErrorRetryable] or [ErrorUnclassified], checked in the dispatcher's
// order. nil gives "".
func Classify(err error) string {
	switch {
	case err == nil:
		return ""
	case outbox.IsDefer(err):
		return ErrorDefer
	case outbox.IsPermanent(err):
		return ErrorPermanent
	case outbox.IsRetryable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ErrorRetryable
	default:
		return ErrorUnclassified
	}
}

// SystemForScheme returns the messaging.system value for a sink URL
// scheme: the OpenTelemetry well-known name where there is one
// ("amqp" → "rabbitmq"), "webhook" for http and https, else the scheme
// itself.
func SystemForScheme(scheme string) string {
	switch scheme {
	case "http", "https":
		return "webhook"
	case "amqp", "amqps":
		return "rabbitmq"
	case "rediss":
		return "redis"
	case "mqtts":
		return "mqtt"
	default:
		return scheme
	}
}
