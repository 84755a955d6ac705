// Package tracing carries OpenTelemetry traces across the outbox: a producer
// stores its trace context in the message's headers with [Headers], and a
// sink wrapped by [WrapSink] continues that trace with one PRODUCER span per
// delivery attempt, whose context it hands on to the destination in the
// message's headers.
//
//	// Producer, inside the business transaction:
//	outbox.Enqueue(ctx, tx, outbox.NewMessage{..., Headers: tracing.Headers(ctx)})
//
//	// Relay:
//	sink = tracing.WrapSink(sink, &tracing.Options{TracerProvider: tp, System: "kafka"})
//
// Tracing lives here rather than in package outbox so that the core never
// imports OpenTelemetry, and costs nothing where it is not wanted: an
// unwrapped sink does no tracing work at all. [Setup] builds the
// TracerProvider the outboxd daemon uses, from the standard OTEL_*
// environment variables only.
//
// Spans follow the OpenTelemetry messaging semantic conventions (semconv
// v1.43.0): span name "send" or "send {destination}", kind PRODUCER,
// messaging.operation.type and messaging.operation.name "send",
// messaging.system, messaging.message.id (the outbox id),
// messaging.destination.name when known, and error.type on failure, plus
// the outbox's own attributes outbox.event_type, outbox.aggregate_type,
// outbox.aggregate_id, outbox.attempt and outbox.fencing_token.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// w3c is the propagator used when none is given and no global one is set:
// W3C Trace Context and Baggage, the formats the headers are documented in.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// propagatorOrDefault returns p, else the global propagator, else W3C. The
// global one is a no-op until an application sets it (it then reports the
// fields it writes); falling back keeps traces flowing in a program that
// set a TracerProvider but not a propagator, which is the common mistake.
func propagatorOrDefault(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p != nil {
		return p
	}
	if g := otel.GetTextMapPropagator(); len(g.Fields()) > 0 {
		return g
	}
	return w3c
}

// Headers returns the trace context of ctx as message headers (traceparent,
// tracestate and baggage with the default W3C propagation), for a producer
// to store with its message:
//
//	outbox.NewMessage{..., Headers: tracing.Headers(ctx)}
//
// It uses the global propagator (otel.SetTextMapPropagator), or W3C Trace
// Context and Baggage when none is set. It returns nil when ctx carries no
// span, so an untraced producer stores no headers.
func Headers(ctx context.Context) map[string]string { return HeadersWith(ctx, nil) }

// HeadersWith is [Headers] with propagator p; nil means the default.
func HeadersWith(ctx context.Context, p propagation.TextMapPropagator) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := headerCarrier{}
	propagatorOrDefault(p).Inject(ctx, h)
	if len(h) == 0 {
		return nil
	}
	return h
}

// headerCarrier is a propagation carrier over message headers whose names
// match case-insensitively, as HTTP and most broker headers do: a header a
// producer stored as "Traceparent" is read, and replaced rather than
// duplicated (which an HTTP sink would send as one header with two values).
type headerCarrier map[string]string

var _ propagation.TextMapCarrier = headerCarrier(nil)

func (c headerCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	c.del(key)
	c[key] = value
}

func (c headerCarrier) del(key string) {
	for k := range c {
		if strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
