package redissink_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
	"github.com/outboxd/outbox/sink/redissink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestNewURL(t *testing.T) {
	t.Parallel()
	pool := strconv.Itoa(redissink.PoolSizeDefault)
	for _, tt := range []struct{ in, want string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379/0?stream=outbox:{aggregate_type}&maxlen=0&idmp=auto&producer=outboxd&pipeline=off&pool_size=" + pool + "&timeout=5s"},
		{"redis://localhost", "redis://localhost:6379/0?stream=outbox:{aggregate_type}&maxlen=0&idmp=auto&producer=outboxd&pipeline=off&pool_size=" + pool + "&timeout=5s"},
		{"redis://[::1]:6380/2", "redis://[::1]:6380/2?stream=outbox:{aggregate_type}&maxlen=0&idmp=auto&producer=outboxd&pipeline=off&pool_size=" + pool + "&timeout=5s"},
		{"redis://:s3cret@h/1", "redis://:xxxxx@h:6379/1?stream=outbox:{aggregate_type}&maxlen=0&idmp=auto&producer=outboxd&pipeline=off&pool_size=" + pool + "&timeout=5s"},
		{
			"rediss://app:s3cret@redis.example.com:6380/3?stream=ev:{event_type}:{aggregate_id}&maxlen=1000&idmp=off&producer=billing&pipeline=on&pool_size=8&timeout=250ms",
			"rediss://app:xxxxx@redis.example.com:6380/3?stream=ev:{event_type}:{aggregate_id}&maxlen=1000&idmp=off&producer=billing&pipeline=on&pool_size=8&timeout=250ms",
		},
		{"redis://h?idmp=on&stream=" + url.QueryEscape("fixed"), "redis://h:6379/0?stream=fixed&maxlen=0&idmp=on&producer=outboxd&pipeline=off&pool_size=" + pool + "&timeout=5s"},
	} {
		s, err := redissink.New(tt.in, nil)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, s.String())
		require.NoError(t, s.Close())
	}

	for _, tt := range []struct{ in, wantErr string }{
		{"", "no scheme"},
		{"127.0.0.1:6379", "malformed URL"},
		{"localhost:6379", `unsupported URL scheme "localhost"`},
		{"http://h", `unsupported URL scheme "http"`},
		{"redis://", "no host"},
		{"redis:///0", "no host"},
		{"redis://h:99999", "invalid port"},
		{"redis://app:hunter2@h:port/", "malformed URL"},
		{"redis://h/x", "invalid database"},
		{"redis://h/-1", "invalid database"},
		{"redis://h?stream=", "stream must not be empty"},
		{"redis://h?stream=a:{nope}", "unknown placeholder {nope}"},
		{"redis://h?stream=a:{event_type", "unclosed placeholder"},
		{"redis://h?maxlen=-1", "maxlen"},
		{"redis://h?maxlen=many", "maxlen"},
		{"redis://h?idmp=maybe", "idmp"},
		{"redis://h?producer=", "producer"},
		{"redis://h?pool_size=0", "pool_size"},
		{"redis://h?pipeline=yes", "pipeline"},
		{"redis://h?timeout=0s", "timeout"},
		{"redis://h?timeout=soon", "timeout"},
		{"redis://h?strem=x", `unknown URL parameter "strem" (known: idmp, maxlen, pipeline, pool_size, producer, stream, timeout)`},
		{"redis://h?stream=a&stream=b", "given 2 times"},
		{"redis://app:hunter2@h?bogus=1", "bogus"},
		{"redis://h?maxlen=%zz", "malformed URL query"},
	} {
		s, err := redissink.New(tt.in, nil)
		require.Error(t, err, tt.in)
		require.Nil(t, s)
		require.Contains(t, err.Error(), tt.wantErr, tt.in)
		require.NotContains(t, err.Error(), "hunter2", "an error must never show the password")
	}
}

func TestStreamTemplate(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	s, err := redissink.New(sinkURL(upstream, key+":{aggregate_type}:{event_type}:{aggregate_id}", ""), nil)
	require.NoError(t, err)
	defer s.Close()

	a := sinktest.NewMessage("42")
	b := sinktest.NewMessage("7")
	b.AggregateType, b.EventType = "customer", "CustomerMoved"
	require.NoError(t, s.Publish(t.Context(), a))
	require.NoError(t, s.Publish(t.Context(), b))

	got := readStream(t, c, key+":order:OrderCreated:42")
	require.Len(t, got, 1)
	require.Equal(t, a.IDString(), got[0].ID)
	got = readStream(t, c, key+":customer:CustomerMoved:7")
	require.Len(t, got, 1)
	require.Equal(t, b.IDString(), got[0].ID)
}

func TestEntryFields(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	s, err := redissink.New(sinkURL(upstream, key, ""), nil)
	require.NoError(t, err)
	defer s.Close()

	m := sinktest.NewMessage("Agg 1")
	m.CreatedAt = time.Date(2024, 3, 1, 10, 0, 0, 123456000, time.FixedZone("CET", 3600))
	require.NoError(t, s.Publish(t.Context(), m))
	entries, err := c.XRange(t.Context(), key, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, map[string]any{
		"id":             m.IDString(),
		"row_id":         strconv.FormatInt(m.ID, 10),
		"event_type":     "OrderCreated",
		"aggregate_type": "order",
		"aggregate_id":   "Agg 1",
		"fencing_token":  "7",
		"attempt":        "2",
		"created_at":     "2024-03-01T09:00:00.123456Z",
		"payload":        string(m.Payload),
	}, entries[0].Values)
}

func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	s, err := redissink.New(sinkURL(upstream, key, "maxlen=10"), nil)
	require.NoError(t, err)
	defer s.Close()
	const n = 500
	for range n {
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
	}
	length, err := c.XLen(t.Context(), key).Result()
	require.NoError(t, err)
	// Approximate trimming drops whole radix-tree nodes (100 entries by
	// default), so the length lands between the limit and limit+node size.
	require.GreaterOrEqual(t, length, int64(10))
	require.Less(t, length, int64(n), "MAXLEN ~ 10 must have trimmed the stream")
}

// serverHasIDMP reports whether the test server has XADD IDMP (Redis 8.6+),
// so the dedupe tests assert what this server must do either way.
func serverHasIDMP(t *testing.T, c *redis.Client) bool {
	t.Helper()
	info, err := c.Info(t.Context(), "server").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		parts := strings.SplitN(v, ".", 3)
		require.GreaterOrEqual(t, len(parts), 2, "redis_version %q", v)
		major, _ := strconv.Atoi(parts[0])
		minor, _ := strconv.Atoi(parts[1])
		return major > 8 || major == 8 && minor >= 6
	}
	t.Fatal("no redis_version in INFO server")
	return false
}

func TestDedupe(t *testing.T) {
	t.Parallel()
	c := direct(t)
	idmp := serverHasIDMP(t, c)

	t.Run("AutoUsesIDMPWhenTheServerHasIt", func(t *testing.T) {
		t.Parallel()
		key := newKey(t, c)
		var logs testio.Buffer
		s, err := redissink.New(sinkURL(upstream, key, ""), &redissink.Options{
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		require.NoError(t, err)
		defer s.Close()

		m := sinktest.NewMessage("a")
		// Concurrent first publishes all meet the detection.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() { errs <- s.Publish(t.Context(), sinktest.NewMessage("b")) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, s.Publish(t.Context(), m))
		require.NoError(t, s.Publish(t.Context(), m), "a re-publish succeeds either way")

		var ids []string
		for _, r := range readStream(t, c, key) {
			if r.ID == m.IDString() {
				ids = append(ids, r.ID)
			}
		}
		if idmp {
			require.Len(t, ids, 1, "Redis must have dropped the re-publish")
			require.Contains(t, logs.String(), "server supports XADD IDMP")
		} else {
			require.Len(t, ids, 2, "without IDMP the re-publish is a second entry with the same id field")
			require.Equal(t, 1, strings.Count(logs.String(), "server has no XADD IDMP"), "the fallback is logged once: %s", logs.String())
		}
		require.Len(t, readStream(t, c, key), 8+len(ids), "the fallback must not duplicate the first publishes")
	})

	t.Run("OnNeedsTheServerToHaveIt", func(t *testing.T) {
		t.Parallel()
		key := newKey(t, c)
		s, err := redissink.New(sinkURL(upstream, key, "idmp=on"), nil)
		require.NoError(t, err)
		defer s.Close()
		m := sinktest.NewMessage("a")
		err = s.Publish(t.Context(), m)
		if idmp {
			require.NoError(t, err)
			require.NoError(t, s.Publish(t.Context(), m))
			require.Len(t, readStream(t, c, key), 1)
			return
		}
		require.Error(t, err)
		require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
		require.Contains(t, err.Error(), "IDMP")
		require.Empty(t, readStream(t, c, key))
	})

	t.Run("OffNeverSendsIt", func(t *testing.T) {
		t.Parallel()
		key := newKey(t, c)
		s, err := redissink.New(sinkURL(upstream, key, "idmp=off"), nil)
		require.NoError(t, err)
		defer s.Close()
		m := sinktest.NewMessage("a")
		require.NoError(t, s.Publish(t.Context(), m))
		require.NoError(t, s.Publish(t.Context(), m))
		got := readStream(t, c, key)
		require.Len(t, got, 2)
		require.Equal(t, got[0].ID, got[1].ID)
	})
}

// TestServerRejections provokes real refusals: an ACL user that may not
// XADD (NOPERM) and a wrong password (WRONGPASS) are conditions of the
// credentials (unavailable); a database that does not exist is permanent.
func TestServerRejections(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	user := strings.ReplaceAll(key, ":", "-")
	require.NoError(t, c.Do(t.Context(), "ACL", "SETUSER", user, "on", ">right-pw", "~*", "+@connection", "+@read").Err())
	t.Cleanup(func() { _ = c.Do(context.Background(), "ACL", "DELUSER", user).Err() })

	for _, tt := range []struct {
		name, url, want string
		unavailable     bool
	}{
		{"NoPermission", "redis://" + user + ":right-pw@" + upstream + "/0?stream=" + key, "NOPERM", true},
		{"WrongPassword", "redis://" + user + ":wrong-pw@" + upstream + "/0?stream=" + key, "WRONGPASS", true},
		{"NoSuchDatabase", "redis://" + upstream + "/100000?stream=" + key, "DB index is out of range", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := redissink.New(tt.url, nil)
			require.NoError(t, err)
			defer s.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err = s.Publish(ctx, sinktest.NewMessage("a"))
			require.Error(t, err)
			require.Equal(t, tt.unavailable, outbox.IsUnavailable(err), "unavailable: %v", err)
			require.Equal(t, !tt.unavailable, outbox.IsPermanent(err), "permanent: %v", err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "right-pw")
			require.NotContains(t, err.Error(), "wrong-pw")
		})
	}
}

// replyErr is a Redis error reply, as go-redis reports one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestClassify(t *testing.T) {
	t.Parallel()
	retryable := []error{
		context.Canceled,
		context.DeadlineExceeded,
		io.EOF,
		io.ErrUnexpectedEOF,
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
		redis.ErrPoolTimeout,
		redis.ErrClosed,
		replyErr("LOADING Redis is loading the dataset in memory"),
		replyErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
		replyErr("TRYAGAIN Multiple keys request during rehashing of slot"),
		replyErr("CLUSTERDOWN The cluster is down"),
		replyErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
		replyErr("READONLY You can't write against a read only replica."),
		replyErr("OOM command not allowed when used memory > 'maxmemory'."),
		replyErr("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."),
		replyErr("NOREPLICAS Not enough good replicas to write."),
		replyErr("ERR max number of clients reached"),
		replyErr("SOMETHINGNEW the future"),
	}
	for _, err := range retryable {
		got := redissink.Classify(fmt.Errorf("redissink: XADD k on h: %w", err))
		require.True(t, outbox.IsRetryable(got), "%v: want retryable, got %v", err, got)
		require.ErrorIs(t, got, err)
	}
	unavailable := []error{
		replyErr("NOPERM User app has no permissions to run the 'xadd' command"),
		replyErr("NOPERM No permissions to access a key"),
		replyErr("NOAUTH Authentication required."),
		replyErr("WRONGPASS invalid username-password pair or user is disabled."),
		replyErr("ERR invalid password"),
		replyErr("ERR AUTH <password> called without any password configured for the default user."),
		x509.UnknownAuthorityError{},
		x509.HostnameError{Host: "redis.example.com", Certificate: &x509.Certificate{}},
	}
	for _, err := range unavailable {
		got := redissink.Classify(fmt.Errorf("redissink: XADD k on h: %w", err))
		require.True(t, outbox.IsUnavailable(got), "%v: want unavailable, got %v", err, got)
	}
	permanent := []error{
		replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"),
		replyErr("ERR syntax error"),
		replyErr("ERR Invalid stream ID specified as stream command argument"),
		replyErr("ERR unknown command 'XADD', with args beginning with: "),
		replyErr("ERR wrong number of arguments for 'xadd' command"),
		replyErr("ERR DB index is out of range"),
		replyErr("MOVED 3999 127.0.0.1:6381"),
		replyErr("ASK 3999 127.0.0.1:6381"),
		replyErr("ERR The stream has exhausted the last possible ID, unable to add more items"),
		replyErr("ERR Protocol error: invalid bulk length"),
	}
	for _, err := range permanent {
		got := redissink.Classify(fmt.Errorf("redissink: XADD k on h: %w", err))
		require.True(t, outbox.IsPermanent(got), "%v: want permanent, got %v", err, got)
	}
}

func TestServerDownAtNew(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)

	t.Run("NothingListening", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		s, err := redissink.New(sinkURL(testio.FreeAddr(t), key, ""), nil)
		require.NoError(t, err, "New must not need the server")
		defer s.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err = s.Publish(ctx, sinktest.NewMessage("a"))
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
		require.Less(t, time.Since(start), 3*time.Second)
	})

	t.Run("ComesUpLater", func(t *testing.T) {
		t.Parallel()
		p := sinktest.NewProxy(t, upstream)
		p.Cut()
		s, err := redissink.New(sinkURL(p.Addr(), key, ""), nil)
		require.NoError(t, err)
		defer s.Close()
		m := sinktest.NewMessage("a")
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err = s.Publish(ctx, m)
		cancel()
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)

		p.Restore()
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			return s.Publish(ctx, m) == nil
		}, 15*time.Second, 50*time.Millisecond)
		require.NotEmpty(t, readStream(t, c, key))
	})
}

// blackhole accepts connections and never answers, like a server that hangs
// mid-command.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, conn) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestCancelWhileWaitingForReply checks that cancelling a context without a
// deadline ends a publish whose reply never comes, and that Close then
// leaves nothing behind (goleak in TestMain).
func TestCancelWhileWaitingForReply(t *testing.T) {
	t.Parallel()
	s, err := redissink.New(sinkURL(blackhole(t), "k", "timeout=30s"), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err = s.Publish(ctx, sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.Less(t, time.Since(start), 2*time.Second, "cancellation must end the wait")

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on the publish still waiting for its reply")
	}
}

func TestManyInFlight(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	s, err := redissink.New(sinkURL(upstream, key, ""), nil)
	require.NoError(t, err)
	defer s.Close()

	const workers, per = 64, 40
	elapsed := sinktest.PublishConcurrently(t, s, workers, per, func(int, int) *outbox.Message { return sinktest.NewMessage("a") })
	n, err := c.XLen(t.Context(), key).Result()
	require.NoError(t, err)
	require.Equal(t, int64(workers*per), n)
	t.Logf("%d publishes from %d goroutines in %s (%.0f msgs/s)", workers*per, workers, elapsed, float64(workers*per)/elapsed.Seconds())
	require.Less(t, elapsed, 15*time.Second)
}

// BenchmarkPublish measures parallel publishes to one stream on the real
// server from 64 goroutines (dispatcher workers), with one XADD per pooled
// connection at a time (Pool) and with the autopipeliner (AutoPipeline).
func BenchmarkPublish(b *testing.B) {
	c := direct(b)
	for _, bb := range []struct{ name, extra string }{
		{"Pool", "pipeline=off"},
		{"AutoPipeline", "pipeline=on"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			key := newKey(b, c)
			s, err := redissink.New(sinkURL(upstream, key, "maxlen=100000&"+bb.extra), nil)
			require.NoError(b, err)
			defer s.Close()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Publish(context.Background(), sinktest.NewMessage("a")); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
