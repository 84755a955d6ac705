package kafkasink_test

import (
	"testing"

	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	sinktest.CheckURLs(t, kafkasink.CheckURL, nil,
		"kafka://u:s3cr3t@h:9092?sasl=plain&topic=t&linger=5ms", []sinktest.URLCase{
			{"UnknownKey", "kafka://u:s3cr3t@h:1?sasl=plain&lingr=1s", `kafkasink: unknown URL parameter "lingr" (known: acks, client_id, create_topics, linger, max_buffered, sasl, timeout, tls, topic)`},
			{"RepeatedKey", "kafka://u:s3cr3t@h:1?sasl=plain&linger=1s&linger=2s", "kafkasink: URL parameter linger given 2 times; give it once"},
			{"BadDuration", "kafka://u:s3cr3t@h:1?sasl=plain&timeout=5", `kafkasink: timeout must be a duration of at least 1s (such as 5s), got "5"`},
			{"SecretNotEchoed", "kafka://u:s3cr3t@h:99999?sasl=plain", "port must be 1-65535"},
		})
}
