package amqpsink_test

import (
	"testing"

	"github.com/outboxd/outbox/sink/amqpsink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	sinktest.CheckURLs(t, amqpsink.CheckURL, nil,
		"amqp://u:s3cr3t@rabbit/?exchange=ex&reconnect_max=2s", []sinktest.URLCase{
			{"UnknownKey", "amqp://u:s3cr3t@rabbit/?exchnge=x", `amqpsink: unknown URL parameter "exchnge" (known: auth_mechanism, cacertfile, certfile, channels, connection_timeout, exchange, heartbeat, keyfile, mandatory, persistent, reconnect_max, routing_key, server_name_indication)`},
			{"RepeatedKey", "amqp://u:s3cr3t@rabbit/?channels=1&channels=2", "amqpsink: URL parameter channels given 2 times; give it once"},
			{"BadDuration", "amqp://u:s3cr3t@rabbit/?reconnect_max=soon", `amqpsink: reconnect_max must be a duration of at least 100ms (such as 5s), got "soon"`},
			{"SecretNotEchoed", "amqp://u:s3cr3t%zz@rabbit/", "amqpsink: malformed URL"},
		})
}
