package mqttsink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/mqttsink"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	require.NoError(t, mqttsink.CheckURL("mqtt://u:s3cr3t@broker?topic=a/{event_type}&keepalive=10s"))
	for _, tt := range []struct{ name, url, want string }{
		{"UnknownKey", "mqtt://u:s3cr3t@broker?qos=1", `mqttsink: unknown URL parameter "qos" (known: client_id, connect_timeout, keepalive, topic)`},
		{"RepeatedKey", "mqtt://u:s3cr3t@broker?keepalive=1s&keepalive=2s", "mqttsink: URL parameter keepalive given 2 times; give it once"},
		{"BadDuration", "mqtt://u:s3cr3t@broker?keepalive=20h", `mqttsink: keepalive must be a duration from 0s to 18h12m15s, got "20h"`},
		{"SecretNotEchoed", "mqtt://u:s3cr3t@broker:port", "mqttsink: malformed URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := mqttsink.CheckURL(tt.url)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "s3cr3t")
			_, newErr := mqttsink.New(tt.url, nil)
			require.EqualError(t, newErr, err.Error(), "CheckURL reports what New does")
		})
	}
}
