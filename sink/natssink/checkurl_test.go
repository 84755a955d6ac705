package natssink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/natssink"
)

func TestCheckURLSharedErrors(t *testing.T) {
	t.Parallel()
	require.NoError(t, natssink.CheckURL("nats://u:s3cr3t@h:4222?subject=a.b&timeout=2s"))
	for _, tt := range []struct{ name, url, want string }{
		{"UnknownKey", "nats://u:s3cr3t@h?subjct=x", `natssink: unknown URL parameter "subjct" (known: connect_timeout, create_stream, creds, duplicate_window, max_pending, name, reconnect_wait, subject, timeout)`},
		{"RepeatedKey", "nats://u:s3cr3t@h?subject=a&subject=b", "natssink: URL parameter subject given 2 times; give it once"},
		{"BadDuration", "nats://u:s3cr3t@h?timeout=5", `natssink: timeout must be a positive duration such as 5s, got "5"`},
		{"SecretNotEchoed", "nats://u:s3cr3t@h:bad", "natssink: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := natssink.CheckURL(tt.url)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "s3cr3t")
			_, newErr := natssink.New(tt.url, nil)
			require.EqualError(t, newErr, err.Error(), "CheckURL reports what New does")
		})
	}
}
