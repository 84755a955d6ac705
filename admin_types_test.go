package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

func TestAdminUndeliveredTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t,
		outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "OrderPaid", Payload: 1},
		outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "OrderCreated", Payload: 1},
		outbox.NewMessage{AggregateType: "order", AggregateID: "2", EventType: "OrderCreated", Payload: 1},
		outbox.NewMessage{AggregateType: "customer", AggregateID: "1", EventType: "Created", Payload: 1},
		outbox.NewMessage{AggregateType: "invoice", AggregateID: "1", EventType: "Sent", Payload: 1},
	)
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'done', done_at = now() WHERE id = $1", ids[4])
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'processing', lease_until = now() WHERE id = $1", ids[3])
	types, err := b.admin.UndeliveredTypes(t.Context())
	require.NoError(t, err)
	require.Equal(t, [][2]string{{"customer", "Created"}, {"order", "OrderCreated"}, {"order", "OrderPaid"}}, types,
		"distinct pending and processing pairs only")
}
