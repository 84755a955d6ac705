package stdoutsink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/stdoutsink"
)

func testMessage(id int64, payload string) *outbox.Message {
	return &outbox.Message{
		ID:            id,
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "OrderCreated",
		Payload:       json.RawMessage(payload),
		CreatedAt:     time.Date(2024, 3, 1, 19, 0, 0, 123456000, time.FixedZone("JST", 9*3600)),
		Attempt:       2,
		FencingToken:  7,
	}
}

func TestPublishWritesOneJSONLine(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	s := stdoutsink.New(&buf)

	require.NoError(t, s.Publish(context.Background(), testMessage(1, `{"total": 10}`)))
	require.NoError(t, s.Close())

	require.Equal(t,
		`{"id":1,"aggregate_type":"order","aggregate_id":"42","event_type":"OrderCreated",`+
			`"created_at":"2024-03-01T10:00:00.123456Z","attempt":2,"fencing_token":7,"payload":{"total": 10}}`+"\n",
		buf.String())
}

func TestPublishWritesTheNamespacedKey(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	s := stdoutsink.New(&buf)
	m := testMessage(9, `{}`)
	m.IDNamespace = "orders"
	require.NoError(t, s.Publish(context.Background(), m))
	require.NoError(t, s.Close())
	require.True(t, strings.HasPrefix(buf.String(), `{"id":9,"key":"orders:9","aggregate_type":"order",`), buf.String())
}

func TestPublishEscapesMetadata(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	s := stdoutsink.New(&buf)
	msg := testMessage(1, `{}`)
	msg.AggregateID = "a \"quoted\"\nid <é>"

	require.NoError(t, s.Publish(context.Background(), msg))

	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	require.Equal(t, msg.AggregateID, got["aggregate_id"])
	require.Equal(t, 1, strings.Count(buf.String(), "\n"))
}

func TestPublishKeepsPayloadBytes(t *testing.T) {
	t.Parallel()

	// Spacing, key order, number spelling, HTML-ish characters, escapes
	// and raw unicode: re-encoding would alter at least one of each.
	payloads := []string{
		`{ "z":1,"a" : "<b>&amp;</b>",  "n":[1.50, 2e3, -0] }`,
		`{"emoji":"😀","esc":"caf\u00e9\n\"q\"","nested":{"x":null}}`,
		`"just a string"`,
		`[]`,
		`123.4500`,
		"{\t\"tab\":\ttrue }",
	}
	for i, p := range payloads {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()

			var buf bytes.Buffer
			s := stdoutsink.New(&buf)

			require.NoError(t, s.Publish(context.Background(), testMessage(1, p)))

			require.True(t, strings.HasSuffix(buf.String(), `,"payload":`+p+"}\n"), buf.String())
			var got struct{ Payload json.RawMessage }
			require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
			require.Equal(t, p, string(got.Payload))
		})
	}
}

func TestPublishPayloadEdgeCases(t *testing.T) {
	t.Parallel()

	t.Run("LineBreaksCompacted", func(t *testing.T) {
		t.Parallel()

		var buf bytes.Buffer
		s := stdoutsink.New(&buf)

		require.NoError(t, s.Publish(context.Background(), testMessage(1, "{\r\n  \"a\": \"x\\ny\",\n  \"b\": [1, 2]\n}")))

		require.True(t, strings.HasSuffix(buf.String(), `,"payload":{"a":"x\ny","b":[1,2]}}`+"\n"), buf.String())
		require.Equal(t, 1, strings.Count(buf.String(), "\n"))
	})
	t.Run("EmptyIsNull", func(t *testing.T) {
		t.Parallel()

		var buf bytes.Buffer
		s := stdoutsink.New(&buf)

		require.NoError(t, s.Publish(context.Background(), testMessage(1, "")))

		require.True(t, strings.HasSuffix(buf.String(), `,"payload":null}`+"\n"), buf.String())
	})
	t.Run("InvalidIsPermanent", func(t *testing.T) {
		t.Parallel()

		var buf bytes.Buffer
		s := stdoutsink.New(&buf)

		err := s.Publish(context.Background(), testMessage(1, `{"a":`))

		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.Zero(t, buf.Len())
	})
}

// lineWriter records Writes and notices two of them running at once.
type lineWriter struct {
	active  atomic.Int32
	overlap atomic.Bool
	mu      sync.Mutex
	writes  [][]byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if w.active.Add(1) > 1 {
		w.overlap.Store(true)
	}
	defer w.active.Add(-1)
	// Widen the window in which an unserialized Write would overlap.
	for range 100 {
		_ = w.active.Load()
	}
	w.mu.Lock()
	w.writes = append(w.writes, bytes.Clone(p))
	w.mu.Unlock()
	return len(p), nil
}

func TestPublishConcurrentWholeLines(t *testing.T) {
	t.Parallel()

	w := &lineWriter{}
	s := stdoutsink.New(w)

	const goroutines, perGoroutine = 20, 50
	errs := make(chan error, goroutines*perGoroutine)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				id := int64(g*perGoroutine + i + 1)
				errs <- s.Publish(context.Background(), testMessage(id, fmt.Sprintf(`{"n": %d, "pad": %q}`, id, strings.Repeat("x", 512))))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	require.False(t, w.overlap.Load(), "Writes overlapped")
	require.Len(t, w.writes, goroutines*perGoroutine)
	seen := make(map[int64]bool)
	for _, b := range w.writes {
		require.Equal(t, 1, bytes.Count(b, []byte("\n")))
		require.Equal(t, byte('\n'), b[len(b)-1])
		var got struct {
			ID      int64
			Payload struct{ N int64 }
		}
		require.NoError(t, json.Unmarshal(b, &got))
		require.Equal(t, got.ID, got.Payload.N)
		seen[got.ID] = true
	}
	require.Len(t, seen, goroutines*perGoroutine)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestPublishWriteErrorIsRetryable(t *testing.T) {
	t.Parallel()

	s := stdoutsink.New(failingWriter{})

	err := s.Publish(context.Background(), testMessage(1, `{}`))

	require.True(t, outbox.IsRetryable(err), "%v", err)
	require.ErrorContains(t, err, "broken pipe")
}

func TestPublishCanceledContextIsRetryable(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	s := stdoutsink.New(&buf)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	err := s.Publish(ctx, testMessage(1, `{}`))

	require.True(t, outbox.IsRetryable(err), "%v", err)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, buf.Len())
}

func TestCloseFlushesBufferedWriter(t *testing.T) {
	t.Parallel()

	t.Run("Flushes", func(t *testing.T) {
		t.Parallel()

		var out bytes.Buffer
		s := stdoutsink.New(bufio.NewWriter(&out))

		require.NoError(t, s.Publish(context.Background(), testMessage(1, `{}`)))
		require.Zero(t, out.Len(), "the bufio.Writer holds the line until flushed")
		require.NoError(t, s.Close())

		require.Equal(t, 1, strings.Count(out.String(), "\n"))
	})
	t.Run("FlushErrorReported", func(t *testing.T) {
		t.Parallel()

		s := stdoutsink.New(bufio.NewWriter(failingWriter{}))

		require.NoError(t, s.Publish(context.Background(), testMessage(1, `{}`)))
		require.ErrorContains(t, s.Close(), "broken pipe")
	})
	t.Run("UnbufferedIsNoop", func(t *testing.T) {
		t.Parallel()

		require.NoError(t, stdoutsink.New(&bytes.Buffer{}).Close())
	})
}
