package amqpsink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/amqpsink"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	require.NoError(t, amqpsink.CheckURL("amqp://u:s3cr3t@rabbit/?exchange=ex&reconnect_max=2s"))
	for _, tt := range []struct{ name, url, want string }{
		{"UnknownKey", "amqp://u:s3cr3t@rabbit/?exchnge=x", `amqpsink: unknown URL parameter "exchnge" (known: auth_mechanism, cacertfile, certfile, channels, connection_timeout, exchange, heartbeat, keyfile, mandatory, persistent, reconnect_max, routing_key, server_name_indication)`},
		{"RepeatedKey", "amqp://u:s3cr3t@rabbit/?channels=1&channels=2", "amqpsink: URL parameter channels given 2 times; give it once"},
		{"BadDuration", "amqp://u:s3cr3t@rabbit/?reconnect_max=soon", `amqpsink: reconnect_max must be a duration of at least 100ms (such as 5s), got "soon"`},
		{"SecretNotEchoed", "amqp://u:s3cr3t%zz@rabbit/", "amqpsink: malformed URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := amqpsink.CheckURL(tt.url)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "s3cr3t")
		})
	}
}
