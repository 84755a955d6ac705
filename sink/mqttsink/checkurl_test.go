package mqttsink_test

import (
	"testing"

	"github.com/outboxd/outbox/sink/mqttsink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	sinktest.CheckURLs(t, mqttsink.CheckURL, func(u string) error { _, err := mqttsink.New(u, nil); return err },
		"mqtt://u:s3cr3t@broker?topic=a/{event_type}&keepalive=10s", []sinktest.URLCase{
			{"UnknownKey", "mqtt://u:s3cr3t@broker?qos=1", `mqttsink: unknown URL parameter "qos" (known: client_id, connect_timeout, keepalive, topic)`},
			{"RepeatedKey", "mqtt://u:s3cr3t@broker?keepalive=1s&keepalive=2s", "mqttsink: URL parameter keepalive given 2 times; give it once"},
			{"BadDuration", "mqtt://u:s3cr3t@broker?keepalive=20h", `mqttsink: keepalive must be a duration from 0s to 18h12m15s, got "20h"`},
			{"SecretNotEchoed", "mqtt://u:s3cr3t@broker:port", "mqttsink: malformed URL"},
		})
}
