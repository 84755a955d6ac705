package redissink_test

import (
	"testing"

	"github.com/outboxd/outbox/sink/redissink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	sinktest.CheckURLs(t, redissink.CheckURL, func(u string) error { _, err := redissink.New(u, nil); return err },
		"redis://u:s3cr3t@h:6379/1?stream=s:{event_type}&pipeline=on&timeout=1s", []sinktest.URLCase{
			{"UnknownKey", "redis://u:s3cr3t@h?strem=x", `redissink: unknown URL parameter "strem" (known: idmp, maxlen, pipeline, pool_size, producer, stream, timeout)`},
			{"RepeatedKey", "redis://u:s3cr3t@h?timeout=1s&timeout=2s", "redissink: URL parameter timeout given 2 times; give it once"},
			{"BadDuration", "redis://u:s3cr3t@h?timeout=0s", `redissink: timeout must be a positive duration such as 5s, got "0s"`},
			{"BadOnOff", "redis://u:s3cr3t@h?pipeline=maybe", `redissink: pipeline must be true or false (on or off), got "maybe"`},
			{"SecretNotEchoed", "redis://u:s3cr3t@h:port", "redissink: malformed URL"},
		})
}
