package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
)

func TestHeadersReachTheSink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ids := b.enqueue(t,
		outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "E", Payload: 1,
			Headers: map[string]string{"traceparent": tp, "x-correlation-id": "c-1"}},
		outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "E", Payload: 2},
	)
	// A hand-written row with non-string values still passes on what it can.
	b.exec(t, "INSERT INTO "+b.quoted+` (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('order', '1', 'E', '3', '{"n": 5, "s": "x"}')`)
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), nil))
	msgs := rec.Messages()
	require.Len(t, msgs, 3)
	byID := map[int64]outbox.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	require.Equal(t, map[string]string{"traceparent": tp, "x-correlation-id": "c-1"}, byID[ids[0]].Headers)
	require.Nil(t, byID[ids[1]].Headers)
	var third outbox.Message
	for _, m := range msgs {
		if m.ID != ids[0] && m.ID != ids[1] {
			third = m
		}
	}
	require.Equal(t, map[string]string{"n": "5", "s": "x"}, third.Headers)
}

func TestOutdatedTableIsUpgradedByMigrate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A table from the first version had no headers column.
	b.exec(t, "ALTER TABLE "+b.quoted+" DROP COLUMN headers")
	d := b.dispatcher(t, outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil }), nil)
	err := d.Drain(t.Context())
	require.True(t, errors.Is(err, outbox.ErrTableOutdated), "got %v", err)
	require.ErrorContains(t, err, "outboxd migrate")

	require.NoError(t, b.admin.Migrate(t.Context()))
	b.enqueueN(t, 2, "a")
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), nil))
	require.Equal(t, 2, rec.Len())
}

// Producer headers a sink does not send are logged with their names, once
// per message: not again on each retry.
func TestDroppedHeadersAreLoggedOncePerMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "E", Payload: 1,
		Headers: map[string]string{"x-ok": "1", "Bad Name": "2"}})
	var calls atomic.Int32
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		for k := range m.Headers {
			if strings.Contains(k, " ") {
				m.DropHeader(k)
			}
		}
		if calls.Add(1) < 3 {
			return outbox.Retryable(errors.New("not yet"))
		}
		return nil
	})
	var logs testio.Buffer
	cfg := &outbox.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond}
	drain(t, b.dispatcher(t, sink, cfg))
	require.EqualValues(t, 3, calls.Load(), "two retries, then delivered")

	var lines []map[string]any
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if strings.HasPrefix(rec["msg"].(string), "headers not sent") {
			lines = append(lines, rec)
		}
	}
	require.Len(t, lines, 1, "one line for the message, not one per attempt")
	require.Equal(t, "WARN", lines[0]["level"])
	require.EqualValues(t, ids[0], lines[0]["outbox_id"])
	require.Equal(t, []any{"Bad Name"}, lines[0]["headers"])
}
