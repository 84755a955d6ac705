package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

func TestErrorShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"POST https://hooks.example.com/orders/42?x=1: 503 Service Unavailable",
			"POST <url>: <n> Service Unavailable"},
		{"order 0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21 not found", "order <uuid> not found"},
		{"trace 4bf92f3577b34da6 refused", "trace <hex> refused"},
		{"bad gateway after 2.5s", "bad gateway after <n>s"},
		{"sha256 mismatch,\n\n  expected   e3b0c442", "sha<n> mismatch, expected <hex>"},
		{"dead beef cafe", "dead beef cafe"}, // words, not ids
	} {
		require.Equal(t, tc.want, outbox.ErrorShape(tc.in), "%q", tc.in)
	}
	require.Equal(t, outbox.ErrorShape("timeout after 30s on 10.0.0.7:443"), outbox.ErrorShape("timeout after 5s on 10.0.0.9:443"),
		"one cause, one shape")
}

// Dead letters grouped by event type and error shape, the largest group
// first; each group's filter selects it for a bulk retry.
func TestDeadTop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dead := func(event, errText string) int64 {
		id := b.enqueue(t, outbox.NewMessage{AggregateType: "order", AggregateID: "a", EventType: event, Payload: 1})[0]
		b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead', attempts = 12, last_error = $2 WHERE id = $1", id, errText)
		return id
	}
	first := dead("OrderPlaced", "POST https://hooks.example.com/o/1: 503 Service Unavailable")
	dead("OrderPlaced", "POST https://hooks.example.com/o/2: 503 Service Unavailable")
	last503 := dead("OrderPlaced", "POST https://hooks.example.com/o/3: 503 Service Unavailable")
	badJSON := dead("OrderPlaced", "receiver refused it: 422 invalid field total")
	other := dead("OrderPaid", "POST https://hooks.example.com/p/9: 503 Service Unavailable")
	b.enqueue(t, outbox.NewMessage{AggregateType: "order", AggregateID: "b", EventType: "OrderPlaced", Payload: 1})

	top, err := b.admin.DeadTop(t.Context(), 0, 0)
	require.NoError(t, err)
	require.EqualValues(t, 5, top.Scanned)
	require.False(t, top.More)
	require.Equal(t, []outbox.DeadGroup{
		{Count: 3, EventType: "OrderPlaced", Shape: "POST <url>: <n> Service Unavailable",
			Sample: "POST https://hooks.example.com/o/3: 503 Service Unavailable", NewestID: last503, OldestID: first,
			Filter: []string{"status=dead", "event_type=OrderPlaced", "error=Service Unavailable"}},
		{Count: 1, EventType: "OrderPaid", Shape: "POST <url>: <n> Service Unavailable",
			Sample: "POST https://hooks.example.com/p/9: 503 Service Unavailable", NewestID: other, OldestID: other,
			Filter: []string{"status=dead", "event_type=OrderPaid", "error=Service Unavailable"}},
		{Count: 1, EventType: "OrderPlaced", Shape: "receiver refused it: <n> invalid field total",
			Sample: "receiver refused it: 422 invalid field total", NewestID: badJSON, OldestID: badJSON,
			Filter: []string{"status=dead", "event_type=OrderPlaced", "error=receiver refused it:"}},
	}, top.Groups)

	// The group's filter retries exactly it.
	f, err := outbox.ParseFilter(top.Groups[0].Filter)
	require.NoError(t, err)
	n, err := b.admin.DeadRetryMatching(t.Context(), f, outbox.BulkOpts{DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	// A bounded read says there is more, and the limit keeps the largest.
	top, err = b.admin.DeadTop(t.Context(), 1, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, top.Scanned)
	require.True(t, top.More)
	require.Len(t, top.Groups, 1)
}
