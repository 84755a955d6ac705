package redissink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/redissink"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	require.NoError(t, redissink.CheckURL("redis://u:s3cr3t@h:6379/1?stream=s:{event_type}&pipeline=on&timeout=1s"))
	for _, tt := range []struct{ name, url, want string }{
		{"UnknownKey", "redis://u:s3cr3t@h?strem=x", `redissink: unknown URL parameter "strem" (known: idmp, maxlen, pipeline, pool_size, producer, stream, timeout)`},
		{"RepeatedKey", "redis://u:s3cr3t@h?timeout=1s&timeout=2s", "redissink: URL parameter timeout given 2 times; give it once"},
		{"BadDuration", "redis://u:s3cr3t@h?timeout=0s", `redissink: timeout must be a positive duration such as 5s, got "0s"`},
		{"BadOnOff", "redis://u:s3cr3t@h?pipeline=maybe", `redissink: pipeline must be true or false (on or off), got "maybe"`},
		{"SecretNotEchoed", "redis://u:s3cr3t@h:port", "redissink: malformed URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := redissink.CheckURL(tt.url)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "s3cr3t")
			_, newErr := redissink.New(tt.url, nil)
			require.EqualError(t, newErr, err.Error(), "CheckURL reports what New does")
		})
	}
}
