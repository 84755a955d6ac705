package console_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

func TestOverviewAndSamples(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 4, "PaymentFailed", "dead")
	b.seed(t, 6, "OrderPaid", "pending")
	b.seed(t, 9, "OrderPaid", "done")
	b.exec(t, `UPDATE {{table}} SET status = 'processing', lease_owner = 'host-a', lease_until = now() + interval '1 minute'
	           WHERE id IN (SELECT id FROM {{table}} WHERE status = 'pending' ORDER BY id LIMIT 2)`)
	c := b.client(t, bearer(testToken))

	o := decode[console.Overview](t, c.get("/api/v1/tables/"+b.table+"/overview"))
	require.Equal(t, int64(4), o.Pending)
	require.Equal(t, int64(2), o.Processing)
	require.Equal(t, int64(4), o.Dead)
	require.Equal(t, int64(9), o.DoneEstimate, "a table never analysed: done is counted, not 0")
	require.False(t, o.DoneEstimated)
	require.Equal(t, []console.BreakdownView{
		{Key: "OrderPaid", Pending: 4, Processing: 2},
		{Key: "PaymentFailed", Dead: 4},
	}, o.ByEventType)
	require.Equal(t, []console.BreakdownView{{Key: "order", Pending: 4, Processing: 2, Dead: 4}}, o.ByAggregateType)
	require.Len(t, o.Dispatchers, 1)
	require.Equal(t, "host-a", o.Dispatchers[0].Owner)
	require.Equal(t, int64(2), o.Dispatchers[0].InFlight)
	require.False(t, o.BreakdownsAt.IsZero())

	// A served console samples on its own; between two samples that saw
	// deliveries, the rate is positive.
	srv, err := console.New(b.pool, &console.Config{Tables: []string{b.table}, Credentials: console.Credentials{Token: testToken},
		SampleInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	sc := &client{t: t, base: "http://" + ln.Addr().String(), http: http.DefaultClient, auth: bearer(testToken)}
	type samples struct {
		Samples []console.Sample `json:"samples"`
	}
	require.Eventually(t, func() bool { return len(decode[samples](t, sc.get("/api/v1/tables/"+b.table+"/samples")).Samples) >= 2 },
		10*time.Second, 10*time.Millisecond)
	b.exec(t, `UPDATE {{table}} SET status = 'done', done_at = now() WHERE status = 'pending'`)
	require.Eventually(t, func() bool {
		for _, s := range decode[samples](t, sc.get("/api/v1/tables/"+b.table+"/samples")).Samples {
			if s.Pending == 0 && s.DeliveredPerSecond != nil && *s.DeliveredPerSecond > 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-served)
}
