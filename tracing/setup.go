package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceNameDefault is service.name when neither OTEL_SERVICE_NAME nor
// OTEL_RESOURCE_ATTRIBUTES names the service.
const ServiceNameDefault = "outboxd"

// Setup builds the TracerProvider of the outboxd daemon from the standard
// OpenTelemetry environment variables, and nothing else:
//
//   - Tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
//     and OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     is set. It is off when OTEL_TRACES_EXPORTER is "none", when nothing is
//     set, and when OTEL_SDK_DISABLED is "true".
//   - Spans are batched (OTEL_BSP_*) and exported with OTLP over HTTP
//     (http/protobuf), configured by the exporter's own OTEL_EXPORTER_OTLP_*
//     variables: endpoint (default http://localhost:4318), headers, timeout,
//     compression, certificates.
//   - The resource has service.name from OTEL_SERVICE_NAME, default
//     [ServiceNameDefault], and OTEL_RESOURCE_ATTRIBUTES; sampling follows
//     OTEL_TRACES_SAMPLER.
//
// Another exporter in OTEL_TRACES_EXPORTER (console, zipkin...) or another
// OTLP protocol (grpc, http/json) is an error, as is a malformed variable,
// so a typo does not silently turn tracing off.
//
// enabled reports whether tracing is on; when it is not, tp is a no-op
// provider, and the caller should not wrap its sink at all. shutdown flushes
// the spans still buffered and stops the exporter; call it once at exit,
// with a deadline. It is never nil, even with an error, and does nothing
// when tracing is off.
func Setup(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, enabled bool, err error) {
	off := noop.NewTracerProvider()
	nothing := func(context.Context) error { return nil }
	on, err := enabledByEnv()
	if err != nil || !on {
		return off, nothing, false, err
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(ServiceNameDefault)),
		// Last, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv(),
	)
	if err != nil {
		return off, nothing, false, fmt.Errorf("tracing: resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return off, nothing, false, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, true, nil
}

// enabledByEnv decides from the environment whether to export traces, and
// rejects what Setup cannot honour.
func enabledByEnv() (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	exporters := getenv("OTEL_TRACES_EXPORTER")
	if exporters == "" {
		if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
			return false, nil
		}
		exporters = "otlp"
	}
	otlp := false
	for e := range strings.SplitSeq(exporters, ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "otlp":
			otlp = true
		case "none", "":
		default:
			return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: exporter %q is not supported; outboxd exports traces with \"otlp\" (or \"none\" to turn tracing off)", exporters, e)
		}
	}
	if !otlp {
		return false, nil
	}
	name, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		name, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("tracing: %s=%q is not supported; outboxd exports OTLP as http/protobuf (usually port 4318)", name, proto)
	}
	return true, nil
}

// getenv treats a variable set to blanks as unset, as the OpenTelemetry
// SDK specification asks.
func getenv(key string) string { return strings.TrimSpace(os.Getenv(key)) }
