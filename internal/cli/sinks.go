package cli

import (
	"context"
	"io"
	"net/url"
	"strings"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/sink/stdoutsink"
)

// sinkSchemes lists the --sink URL schemes, for help and errors.
var sinkSchemes = []string{"stdout", "http", "https", "null"}

// openSink builds the sink a --sink URL names.
//
//	stdout:               JSON lines on standard output (the default)
//	http://... https://... webhook POST per message
//	null:                 accept and discard (benchmarks)
func openSink(rawURL string, stdout io.Writer) (outbox.Sink, error) {
	rawURL = bareScheme(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, usagef("--sink %q is not a URL (supported schemes: %s)", redactURL(rawURL), strings.Join(sinkSchemes, ", "))
	}
	switch strings.ToLower(u.Scheme) {
	case "stdout":
		return stdoutsink.New(stdout), nil
	case "null":
		return nullSink(), nil
	case "http", "https":
		s, err := httpsink.New(rawURL, nil)
		if err != nil {
			return nil, usagef("--sink: %v", err)
		}
		return s, nil
	default:
		return nil, usagef("unknown sink scheme %q in --sink (supported: %s)", u.Scheme, strings.Join(sinkSchemes, ", "))
	}
}

func nullSink() outbox.Sink {
	return outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
}

// redactURL hides a password in a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[unparseable URL]"
	}
	return u.Redacted()
}

// bareScheme accepts "stdout" and "null" for "stdout:" and "null:" (a
// trailing colon needs quoting in YAML).
func bareScheme(raw string) string {
	if raw == "stdout" || raw == "null" {
		return raw + ":"
	}
	return raw
}
