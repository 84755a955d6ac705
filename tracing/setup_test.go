package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxd/outbox/tracing"
)

// clearOTEL blanks every OTEL_* variable for the test; Setup treats a
// blank variable as unset, as the SDK specification asks.
func clearOTEL(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
		}
	}
}

// collector is an OTLP/HTTP receiver recording what it is sent.
type collector struct {
	mu   sync.Mutex
	reqs []collected
}

type collected struct {
	method, path, contentType, auth string
	body                            []byte
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, collected{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), body})
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (c *collector) requests() []collected {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]collected(nil), c.reqs...)
}

func newCollector(t *testing.T) (*collector, string) {
	t.Helper()
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func shutdownSoon(t *testing.T, shutdown func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, shutdown(ctx))
}

// TestSetup is not parallel: its subtests change the process environment.
func TestSetup(t *testing.T) {
	t.Run("OffWithoutVariables", func(t *testing.T) {
		clearOTEL(t)

		tp, shutdown, enabled, err := tracing.Setup(t.Context())

		require.NoError(t, err)
		require.False(t, enabled)
		require.IsType(t, noop.TracerProvider{}, tp)
		_, span := tp.Tracer("x").Start(t.Context(), "y")
		require.False(t, span.IsRecording())
		require.NoError(t, shutdown(t.Context()))
		// No exporter, resource or provider is built: a handful of
		// allocations, where an enabled setup makes hundreds.
		allocs := testing.AllocsPerRun(20, func() { _, _, _, _ = tracing.Setup(context.Background()) })
		require.LessOrEqual(t, allocs, 4.0)
	})
	t.Run("OffWithExporterNone", func(t *testing.T) {
		clearOTEL(t)
		c, url := newCollector(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
		t.Setenv("OTEL_TRACES_EXPORTER", "none")

		tp, shutdown, enabled, err := tracing.Setup(t.Context())

		require.NoError(t, err)
		require.False(t, enabled)
		require.IsType(t, noop.TracerProvider{}, tp)
		_, span := tp.Tracer("x").Start(t.Context(), "y")
		span.End()
		shutdownSoon(t, shutdown)
		require.Empty(t, c.requests())
	})
	t.Run("OffWithSDKDisabled", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
		t.Setenv("OTEL_SDK_DISABLED", "true")

		_, _, enabled, err := tracing.Setup(t.Context())

		require.NoError(t, err)
		require.False(t, enabled)
	})
	t.Run("ExportsToTheOTLPEndpoint", func(t *testing.T) {
		clearOTEL(t)
		c, url := newCollector(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
		t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20collector-token")

		tp, shutdown, enabled, err := tracing.Setup(t.Context())

		require.NoError(t, err)
		require.True(t, enabled)
		_, span := tp.Tracer("x").Start(t.Context(), "setup-test-span")
		span.End()
		shutdownSoon(t, shutdown)
		reqs := c.requests()
		require.NotEmpty(t, reqs, "nothing exported by shutdown")
		r := reqs[0]
		require.Equal(t, http.MethodPost, r.method)
		require.Equal(t, "/v1/traces", r.path)
		require.Equal(t, "application/x-protobuf", r.contentType)
		require.Equal(t, "Bearer collector-token", r.auth)
		// Protobuf keeps strings as they are: no need to decode to find them.
		require.Contains(t, string(r.body), "setup-test-span")
		require.Contains(t, string(r.body), tracing.ServiceNameDefault)
	})
	t.Run("ExportsToTheTracesEndpointAsNamed", func(t *testing.T) {
		clearOTEL(t)
		c, url := newCollector(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url+"/collector/traces")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
		t.Setenv("OTEL_SERVICE_NAME", "billing-relay")

		tp, shutdown, enabled, err := tracing.Setup(t.Context())

		require.NoError(t, err)
		require.True(t, enabled)
		_, span := tp.Tracer("x").Start(t.Context(), "named-endpoint-span")
		span.End()
		shutdownSoon(t, shutdown)
		reqs := c.requests()
		require.NotEmpty(t, reqs)
		require.Equal(t, "/collector/traces", reqs[0].path)
		require.Contains(t, string(reqs[0].body), "named-endpoint-span")
		require.Contains(t, string(reqs[0].body), "billing-relay")
		require.NotContains(t, string(reqs[0].body), tracing.ServiceNameDefault)
	})
	t.Run("UnsupportedExporter", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "otlp,zipkin")

		tp, shutdown, enabled, err := tracing.Setup(t.Context())

		require.ErrorContains(t, err, `OTEL_TRACES_EXPORTER="otlp,zipkin": exporter "zipkin" is not supported`)
		require.False(t, enabled)
		// Safe to use and to defer even on error.
		require.NotNil(t, tp)
		require.NoError(t, shutdown(t.Context()))
	})
	t.Run("UnsupportedProtocol", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")

		_, _, enabled, err := tracing.Setup(t.Context())

		require.ErrorContains(t, err, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc" is not supported`)
		require.False(t, enabled)
	})
}
