package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
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
