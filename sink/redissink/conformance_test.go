package redissink_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/redissink"
	"github.com/outboxd/outbox/sink/sinktest"
)

// upstream is the Redis the tests use: OUTBOX_TEST_REDIS (host:port), else
// the machine's local server.
var upstream = func() string {
	if a := os.Getenv("OUTBOX_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}()

var keySeq atomic.Int64

// newKey returns a key no other test (or earlier run) uses, deleted when the
// test ends.
func newKey(t testing.TB, c *redis.Client) string {
	t.Helper()
	k := fmt.Sprintf("redissink-test:%d:%d:%d", os.Getpid(), time.Now().UnixNano(), keySeq.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, _ := c.Keys(ctx, k+"*").Result()
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return k
}

// direct returns a client straight to the server, for setting up and reading
// back. The server must be up: a test needing it fails, never skips.
func direct(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: upstream, DisableIdentity: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Ping(ctx).Err(), "Redis at %s is required for these tests", upstream)
	// Cleanups run last-in first-out: keys are deleted before this closes.
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type streamReceiver struct {
	c   *redis.Client
	key string
}

func (r streamReceiver) Receive(t *testing.T, n int, timeout time.Duration) []sinktest.Received {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, last := readStreamFrom(t, r.c, r.key)
		left := time.Until(deadline)
		if len(got) >= n || left <= 0 {
			return got
		}
		// Block until an entry after the last one read arrives, or the
		// time is up: woken by the arrival, not by a timer. (A zero block
		// would wait forever.)
		err := r.c.XRead(context.Background(), &redis.XReadArgs{
			Streams: []string{r.key, last}, Count: 1, Block: max(left, time.Millisecond),
		}).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			require.NoError(t, err)
		}
	}
}

func readStream(t testing.TB, c *redis.Client, key string) []sinktest.Received {
	t.Helper()
	got, _ := readStreamFrom(t, c, key)
	return got
}

// readStreamFrom is readStream, with the id of the last entry read ("0-0"
// for none).
func readStreamFrom(t testing.TB, c *redis.Client, key string) ([]sinktest.Received, string) {
	t.Helper()
	entries, err := c.XRange(context.Background(), key, "-", "+").Result()
	require.NoError(t, err)
	last := "0-0"
	if len(entries) > 0 {
		last = entries[len(entries)-1].ID
	}
	got := make([]sinktest.Received, 0, len(entries))
	for _, e := range entries {
		meta := map[string]string{}
		for k, v := range e.Values {
			if k != "payload" && k != "id" {
				meta[k] = fmt.Sprint(v)
			}
		}
		got = append(got, sinktest.Received{
			ID:      fmt.Sprint(e.Values["id"]),
			Payload: []byte(fmt.Sprint(e.Values["payload"])),
			Meta:    meta,
		})
	}
	return got, last
}

func sinkURL(addr, stream string, extra string) string {
	u := "redis://" + addr + "/0?stream=" + url.QueryEscape(stream)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"off", "on"} {
		t.Run("Pipeline="+mode, func(t *testing.T) {
			t.Parallel()
			c := direct(t)
			extra := "pipeline=" + mode
			sinktest.Run(t, sinktest.Harness{
				Upstream: upstream,
				New: func(t *testing.T, addr string) (outbox.Sink, sinktest.Receiver) {
					key := newKey(t, c)
					s, err := redissink.New(sinkURL(addr, key+":{aggregate_type}", extra), nil)
					require.NoError(t, err)
					return s, streamReceiver{c: c, key: key + ":order"}
				},
				Permanent: func(t *testing.T, addr string) (outbox.Sink, *outbox.Message) {
					// A plain string where the stream should be: WRONGTYPE.
					key := newKey(t, c)
					require.NoError(t, c.Set(t.Context(), key, "not a stream", 0).Err())
					s, err := redissink.New(sinkURL(addr, key, extra), nil)
					require.NoError(t, err)
					return s, sinktest.NewMessage("a")
				},
			})
		})
	}
}
