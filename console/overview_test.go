package console_test

import (
	"context"
	"net"
	"net/http"
	"strings"
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
	require.False(t, o.Dispatchers[0].Live, "it holds leases without reporting itself")
	require.Nil(t, o.DoneEstimatedAt, "done is exact")
	// The dead messages are their aggregates' heads (order/0..3); the
	// pending ones of order/2 and order/3 wait behind them.
	require.NotNil(t, o.Blocked)
	require.EqualValues(t, 2, o.Blocked.Aggregates)
	require.EqualValues(t, 2, o.Blocked.Messages)
	require.Len(t, o.Blocked.List, 2)
	require.False(t, o.BreakdownsAt.IsZero())
	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/")
	require.Contains(t, page.body, "not reporting")
	require.Contains(t, page.body, `id="blocked"`)
	require.Contains(t, page.body, "2 pending message(s) of 2 aggregate(s) wait behind a dead message")

	// An idle dispatcher that reports itself is listed beside it; with
	// neither, the page says no dispatcher runs.
	dispatchers := strings.TrimSuffix(b.quoted, `"`) + `_dispatchers"`
	b.exec(t, `INSERT INTO `+dispatchers+` (owner, host, version, lease_mode, beat_us, in_flight, delivered_1m)
	           VALUES ('idle-b', 'web-2', 'v9', 'shard', 10000000, 0, 17)`)
	o = decode[console.Overview](t, c.get("/api/v1/tables/"+b.table+"/overview"))
	require.Len(t, o.Dispatchers, 2)
	idle := o.Dispatchers[1]
	require.Equal(t, "idle-b", idle.Owner)
	require.True(t, idle.Live)
	require.Equal(t, "web-2", idle.Host)
	require.Equal(t, "shard", idle.LeaseMode)
	require.Equal(t, int64(17), idle.Delivered1m)
	require.Nil(t, idle.LeaseUntil, "it holds no lease")
	require.NotNil(t, idle.LastSeen)
	b.exec(t, `DELETE FROM `+dispatchers)
	b.exec(t, `UPDATE {{table}} SET status = 'pending', lease_owner = NULL, lease_until = NULL WHERE status = 'processing'`)
	page = pc.get("/t/" + b.table + "/")
	require.Contains(t, page.body, `id="no-dispatchers"`)
	require.Contains(t, page.body, "No dispatcher is running")
	b.exec(t, `UPDATE {{table}} SET status = 'processing', lease_owner = 'host-a', lease_until = now() + interval '1 minute'
	           WHERE id IN (SELECT id FROM {{table}} WHERE status = 'pending' ORDER BY id LIMIT 2)`)

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

// Past 10,000 done rows the overview's done count is the planner's
// estimate, and it says from when.
func TestOverviewDoneEstimateAsOf(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at)
	           SELECT 'order', g::text, 'OrderPaid', '{}', 'done', now() FROM generate_series(1, 12000) AS g`)
	b.exec(t, `ANALYZE {{table}}`)
	c := b.client(t, bearer(testToken))
	o := decode[console.Overview](t, c.get("/api/v1/tables/"+b.table+"/overview"))
	require.True(t, o.DoneEstimated)
	require.NotNil(t, o.DoneEstimatedAt)
	require.WithinDuration(t, time.Now(), *o.DoneEstimatedAt, time.Minute)
	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/")
	require.Contains(t, page.body, `id="done-as-of">estimate as of <time datetime="`)
}
