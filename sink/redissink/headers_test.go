package redissink_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/redissink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestProducerHeadersTravelAsAField(t *testing.T) {
	t.Parallel()
	key := "outboxd-test-headers-" + sinktest.NewMessage("x").IDString()
	s, err := redissink.New("redis://127.0.0.1:6379/0?stream="+key, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { c.Del(context.Background(), key); _ = c.Close() })

	m := sinktest.NewMessage("a")
	m.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	require.NoError(t, s.Publish(t.Context(), m))
	plain := sinktest.NewMessage("b")
	require.NoError(t, s.Publish(t.Context(), plain))
	entries, err := c.XRange(t.Context(), key, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.JSONEq(t, `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`, entries[0].Values["headers"].(string))
	require.NotContains(t, entries[1].Values, "headers")
}
