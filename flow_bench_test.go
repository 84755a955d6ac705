package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/route"
)

// BenchmarkFlowLimit measures how close three dispatchers keep a limited
// destination to its rate over a backlog: 50 a second (burst 5) shared
// by the three, a backlog of eight seconds' worth, inserted once the
// dispatchers run and (shards, cursors) share the shards out (steady), or
// before they start (start_with_backlog: a deploy with a backlog). Reported per run: the
// rate the receiver saw from its first message to its last, as a share of
// the limit (of_limit), and the most messages in any one second of the
// clock (max_per_s; the limit plus its burst is the promise). One run
// is about 8 s: use -benchtime=1x.
func BenchmarkFlowLimit(b *testing.B) {
	for _, mode := range []outbox.LeaseMode{outbox.LeaseRows, outbox.LeaseShards, outbox.LeaseCursor} {
		for _, backlog := range []bool{false, true} {
			name := string(mode) + "/steady"
			if backlog {
				name = string(mode) + "/start_with_backlog"
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					ofLimit, median, most := flowLimitRun(b, mode, backlog)
					b.ReportMetric(ofLimit, "of_limit")
					b.ReportMetric(median, "median_s_of_limit")
					b.ReportMetric(float64(most), "max_per_s")
				}
			})
		}
	}
}

func flowLimitRun(b *testing.B, mode outbox.LeaseMode, startWithBacklog bool) (ofLimit, median float64, most int) {
	const rate, burst, backlog = 50, 5, 400
	bundle := setup(b)
	switch mode {
	case outbox.LeaseShards:
		require.NoError(b, bundle.admin.EnableShards(context.Background(), 12))
	case outbox.LeaseCursor:
		require.NoError(b, bundle.admin.EnableShards(context.Background(), 12))
		require.NoError(b, bundle.admin.EnableCursors(context.Background()))
	}
	var mu sync.Mutex
	var at []time.Time
	all := make(chan struct{})
	sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if at = append(at, time.Now()); len(at) == backlog {
			close(all)
		}
		return nil
	})
	router, err := route.New([]route.Route{{Sink: sink, Limits: outbox.Destination{Name: "partner", Rate: rate, Burst: burst}}}, sink)
	require.NoError(b, err)
	insert := func() {
		_, err := bundle.pool.Exec(context.Background(), `INSERT INTO `+bundle.quoted+` (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', g::text, 'OrderCreated', '{}' FROM generate_series(1, $1) AS g`, backlog)
		require.NoError(b, err)
	}
	if startWithBacklog {
		insert()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		d, err := outbox.NewDispatcher(bundle.pool, router, &outbox.Config{
			Table: bundle.table, Logger: quietLogger(), LeaseMode: mode, Flow: router, Workers: 8,
			Owner: fmt.Sprintf("bench-%d", i), PollInterval: 100 * time.Millisecond,
		})
		require.NoError(b, err)
		wg.Go(func() { _ = d.Run(ctx) })
	}
	if !startWithBacklog && mode != outbox.LeaseRows {
		// Steady state: the shards shared out before the backlog comes.
		owners := pgx.Identifier{bundle.schema, "outbox_shards"}.Sanitize()
		require.Eventually(b, func() bool {
			var n, most int
			err := bundle.pool.QueryRow(context.Background(), `SELECT count(DISTINCT owner), max(c) FROM (SELECT owner, count(*) OVER (PARTITION BY owner) AS c FROM `+owners+`) AS s`).Scan(&n, &most)
			return err == nil && n == 3 && most == 4
		}, 30*time.Second, 50*time.Millisecond, "the shards shared out")
	}
	if !startWithBacklog {
		insert()
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("delivered %d of %d in a minute", len(at), backlog)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	seconds := map[int64]int{}
	for _, t := range at {
		seconds[t.Unix()]++
		most = max(most, seconds[t.Unix()])
	}
	took := at[len(at)-1].Sub(at[0]).Seconds()
	// The seconds of the clock wholly inside the run: the steady pace,
	// without the start's burst and the backlog's tail.
	var counts []int
	for sec := at[0].Unix() + 1; sec < at[len(at)-1].Unix(); sec++ {
		counts = append(counts, seconds[sec])
	}
	slices.Sort(counts)
	if len(counts) > 0 {
		median = float64(counts[len(counts)/2]) / rate
	}
	return float64(backlog-burst) / took / rate, median, most
}
