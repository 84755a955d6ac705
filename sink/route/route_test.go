package route_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/route"
)

type recording struct {
	name   string
	got    []int64
	closed int
}

func (r *recording) Publish(_ context.Context, m *outbox.Message) error {
	r.got = append(r.got, m.ID)
	return nil
}
func (r *recording) Close() error { r.closed++; return nil }

func TestRouter(t *testing.T) {
	t.Parallel()
	orders, payments, def := &recording{name: "orders"}, &recording{name: "payments"}, &recording{name: "default"}
	r, err := route.New([]route.Route{
		{Name: "payments", EventTypes: []string{"Payment*", "Refund"}, Sink: payments},
		{Name: "orders", AggregateTypes: []string{"order"}, Sink: orders},
	}, def)
	require.NoError(t, err)
	for i, m := range []struct{ agg, ev string }{
		{"order", "OrderCreated"}, {"order", "PaymentTaken"}, {"customer", "Refund"}, {"customer", "Created"},
	} {
		require.NoError(t, r.Publish(t.Context(), &outbox.Message{ID: int64(i + 1), AggregateType: m.agg, EventType: m.ev}))
	}
	require.Equal(t, []int64{1}, orders.got)
	require.Equal(t, []int64{2, 3}, payments.got, "first matching route wins")
	require.Equal(t, []int64{4}, def.got)
	require.Nil(t, r.Unrouted([][2]string{{"x", "y"}}))
	require.NoError(t, r.Close())
	require.Equal(t, 1, orders.closed)
	require.Equal(t, 1, def.closed)
}

func TestRouterWithoutDefault(t *testing.T) {
	t.Parallel()
	orders := &recording{}
	r, err := route.New([]route.Route{{Name: "orders", AggregateTypes: []string{"order"}, Sink: orders}}, nil)
	require.NoError(t, err)
	require.False(t, r.HasDefault())
	err = r.Publish(t.Context(), &outbox.Message{ID: 1, AggregateType: "customer", EventType: "Created"})
	require.True(t, outbox.IsPermanent(err), "unrouted message must go dead, not retry: %v", err)
	require.True(t, errors.Is(err, route.ErrNoRoute))
	require.Equal(t, [][2]string{{"customer", "Created"}},
		r.Unrouted([][2]string{{"order", "X"}, {"customer", "Created"}}))
	// The same sink on two routes is closed once.
	r2, err := route.New([]route.Route{{Sink: orders}, {Sink: orders}}, nil)
	require.NoError(t, err)
	require.NoError(t, r2.Close())
	require.Equal(t, 1, orders.closed)
}

func TestRouterRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := route.New([]route.Route{{Name: "x", EventTypes: []string{"[bad"}, Sink: &recording{}}}, nil)
	require.ErrorContains(t, err, "bad pattern")
	_, err = route.New([]route.Route{{Name: "x"}}, nil)
	require.ErrorContains(t, err, "no sink")
}

// Each message's destination is its route's, named route-N unless named,
// with the route's limits; the default's when no route matches; routes of
// one name must agree on their limits.
func TestRouterDestinations(t *testing.T) {
	t.Parallel()
	sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
	r, err := route.New([]route.Route{
		{EventTypes: []string{"Order*"}, Sink: sink, Limits: outbox.Destination{Rate: 5}},
		{AggregateTypes: []string{"customer"}, Sink: sink, Limits: outbox.Destination{Name: "crm", Concurrency: 2}},
	}, sink)
	require.NoError(t, err)
	require.True(t, r.Limited())
	require.Equal(t, outbox.Destination{Name: "route-1", Rate: 5}, r.Destination(&outbox.Message{AggregateType: "order", EventType: "OrderPaid"}))
	require.Equal(t, outbox.Destination{Name: "crm", Concurrency: 2}, r.Destination(&outbox.Message{AggregateType: "customer", EventType: "Renamed"}))
	require.Equal(t, outbox.Destination{Name: "default"}, r.Destination(&outbox.Message{AggregateType: "invoice", EventType: "Sent"}))
	require.NoError(t, r.LimitDefault(outbox.Destination{Rate: 100, Burst: 10}))
	require.Equal(t, outbox.Destination{Name: "default", Rate: 100, Burst: 10}, r.Destination(&outbox.Message{AggregateType: "invoice"}))
	require.Error(t, r.LimitDefault(outbox.Destination{Name: "crm", Concurrency: 3}), "the default given a route's name and other limits")
	require.Error(t, r.LimitDefault(outbox.Destination{Rate: -1}))

	_, err = route.New([]route.Route{
		{EventTypes: []string{"A"}, Sink: sink, Limits: outbox.Destination{Name: "partner", Rate: 5}},
		{EventTypes: []string{"B"}, Sink: sink, Limits: outbox.Destination{Name: "partner", Rate: 6}},
	}, nil)
	require.ErrorContains(t, err, `"partner"`)
	_, err = route.New([]route.Route{{Sink: sink, Limits: outbox.Destination{Concurrency: -1}}}, nil)
	require.Error(t, err)

	plain, err := route.New([]route.Route{{EventTypes: []string{"A"}, Sink: sink}}, sink)
	require.NoError(t, err)
	require.False(t, plain.Limited())
}
