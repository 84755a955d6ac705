package cli

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/amqpsink"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/mqttsink"
	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/redissink"
	"github.com/outboxd/outbox/sink/sinkutil"
	"github.com/outboxd/outbox/sink/stdoutsink"
	"github.com/outboxd/outbox/tracing"
)

// sinkEnv is what sink constructors may need besides the URL.
type sinkEnv struct {
	stdout  io.Writer
	secrets []string // webhook signing secrets (whsec_...)
	logger  *slog.Logger
	// tracer, when set, wraps every sink in a PRODUCER span per publish.
	tracer trace.TracerProvider
}

// sinkKind is what the command line does with one sink package: build the
// sink (open), check its URL without building it (check, the package's
// CheckURL, for config check) and check that its destination answers and
// takes the credentials (probe, for config check --connect). check and
// probe are nil where there is nothing to check.
type sinkKind struct {
	open  func(rawURL string, se *sinkEnv) (outbox.Sink, error)
	check func(rawURL string) error
	probe func(ctx context.Context, rawURL string) []sinkutil.Check
}

// sinkKinds maps each --sink URL scheme to its sink. Each sink documents
// its URL form in its package README.
var sinkKinds = func() map[string]sinkKind {
	http := sinkKind{newHTTPSink, httpsink.CheckURL, httpsink.Check}
	nats := sinkKind{newNATSSink, natssink.CheckURL, natssink.Check}
	amqp := sinkKind{newAMQPSink, amqpsink.CheckURL, amqpsink.Check}
	kafka := sinkKind{newKafkaSink, kafkasink.CheckURL, kafkasink.Check}
	redis := sinkKind{newRedisSink, redissink.CheckURL, redissink.Check}
	mqtt := sinkKind{newMQTTSink, mqttsink.CheckURL, mqttsink.Check}
	return map[string]sinkKind{
		"stdout":   {open: func(_ string, se *sinkEnv) (outbox.Sink, error) { return stdoutsink.New(se.stdout), nil }, check: stdoutsink.CheckURL},
		"null":     {open: func(string, *sinkEnv) (outbox.Sink, error) { return nullSink(), nil }},
		"http":     http,
		"https":    http,
		"nats":     nats,
		"nats+tls": nats,
		"amqp":     amqp,
		"amqps":    amqp,
		"kafka":    kafka,
		"redis":    redis,
		"rediss":   redis,
		"mqtt":     mqtt,
		"mqtts":    mqtt,
	}
}()

func newHTTPSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	return httpsink.New(rawURL, &httpsink.Options{Secrets: se.secrets})
}

func newNATSSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	return natssink.New(rawURL, &natssink.Options{Logger: se.logger})
}

func newAMQPSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	return amqpsink.New(rawURL, &amqpsink.Options{Logger: se.logger})
}

func newKafkaSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	return kafkasink.New(rawURL, &kafkasink.Options{Logger: se.logger})
}

func newRedisSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	return redissink.New(rawURL, &redissink.Options{Logger: se.logger})
}

func newMQTTSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	return mqttsink.New(rawURL, &mqttsink.Options{Logger: se.logger})
}

// sinkSchemes lists the --sink URL schemes, for help and errors.
func sinkSchemes() []string {
	out := make([]string, 0, len(sinkKinds))
	for k := range sinkKinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parseSinkURL checks a --sink URL's form and returns its scheme.
func parseSinkURL(rawURL string) (string, error) {
	rawURL = bareScheme(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// Never echoed: nothing says where a secret in it ends.
		return "", usagef("--sink %s: %s (supported schemes: %s)", sinkutil.UnparseableURL, sinkutil.ParseErrText(err), strings.Join(sinkSchemes(), ", "))
	}
	if u.Scheme == "" {
		return "", usagef("--sink %q is not a URL: no scheme (supported schemes: %s)", sinkutil.RedactURL(rawURL), strings.Join(sinkSchemes(), ", "))
	}
	scheme := strings.ToLower(u.Scheme)
	if !slices.Contains(sinkSchemes(), scheme) {
		return "", usagef("unknown sink scheme %q (supported: %s)", u.Scheme, strings.Join(sinkSchemes(), ", "))
	}
	return scheme, nil
}

// openSink builds the sink a --sink URL names.
func openSink(rawURL string, se *sinkEnv) (outbox.Sink, error) {
	scheme, err := parseSinkURL(rawURL)
	if err != nil {
		return nil, err
	}
	s, err := sinkKinds[scheme].open(bareScheme(rawURL), se)
	if err != nil {
		return nil, usagef("--sink %s: %v", sinkutil.RedactURL(rawURL), err)
	}
	if se.tracer != nil {
		s = tracing.WrapSink(s, &tracing.Options{TracerProvider: se.tracer, System: tracing.SystemForScheme(scheme)})
	}
	return s, nil
}

func nullSink() outbox.Sink {
	return outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
}

// bareScheme accepts "stdout" and "null" for "stdout:" and "null:" (a
// trailing colon needs quoting in YAML).
func bareScheme(raw string) string {
	if raw == "stdout" || raw == "null" {
		return raw + ":"
	}
	return raw
}
