package natssink_test

import (
	"testing"

	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURLSharedErrors(t *testing.T) {
	t.Parallel()
	sinktest.CheckURLs(t, natssink.CheckURL, func(u string) error { _, err := natssink.New(u, nil); return err },
		"nats://u:s3cr3t@h:4222?subject=a.b&timeout=2s", []sinktest.URLCase{
			{"UnknownKey", "nats://u:s3cr3t@h?subjct=x", `natssink: unknown URL parameter "subjct" (known: connect_timeout, create_stream, creds, duplicate_window, max_pending, name, reconnect_wait, subject, timeout)`},
			{"RepeatedKey", "nats://u:s3cr3t@h?subject=a&subject=b", "natssink: URL parameter subject given 2 times; give it once"},
			{"BadDuration", "nats://u:s3cr3t@h?timeout=5", `natssink: timeout must be a positive duration such as 5s, got "5"`},
			{"SecretNotEchoed", "nats://u:s3cr3t@h:bad", "natssink: "},
		})
}
