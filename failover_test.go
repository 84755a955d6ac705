package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/pgcluster"
)

// TestFailoverToAStandby runs two dispatchers on a multi-host DSN while a
// producer commits messages, kills the primary mid-run and promotes its
// streaming standby, in each lease mode, with synchronous and asynchronous
// replication. Nothing the new primary holds is left undelivered, no
// identity names two messages (the new primary's sequence may reuse the
// ids of rows it never received), each aggregate arrives in commit order,
// and with synchronous replication nothing acknowledged is lost and
// nothing waits long past its commit (a claim whose reply died with the
// primary must not hold its rows for a lease).
func TestFailoverToAStandby(t *testing.T) {
	t.Parallel()
	for _, mode := range leaseModes {
		for _, synchronous := range []bool{true, false} {
			name := mode.name + "/Asynchronous"
			if synchronous {
				name = mode.name + "/Synchronous"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				failover(t, mode, synchronous)
			})
		}
	}
}

// failoverLatencyMax bounds, under synchronous replication, how long a
// message is first delivered after its commit was acknowledged, or after
// the promotion for a message committed before it. A row held by a claim
// whose reply was lost would wait out failoverLease.
const (
	failoverLatencyMax = 5 * time.Second
	failoverLease      = 30 * time.Second
)

// produced is one message the producer sent, and what came of it.
type produced struct {
	acked     time.Time // when the commit was acknowledged; zero if not
	uncertain bool      // the statement failed: it may or may not have committed
}

// arrival is one delivery as a receiver sees it.
type arrival struct {
	key string // the identity the sink sent
	id  int64  // the row id
	n   int    // the producer's sequence number, from the payload
	agg string
	at  time.Time
}

func failover(t *testing.T, mode leaseMode, synchronous bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	primary, err := pgcluster.Start(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	standby, err := primary.StartStandby(ctx, &pgcluster.StandbyOptions{Synchronous: synchronous})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })

	dsn := (&url.URL{Scheme: "postgres", User: url.User(primary.User),
		Host: fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", primary.Port, standby.Port), Path: "/postgres",
		RawQuery: "sslmode=disable&target_session_attrs=read-write&connect_timeout=2"}).String()
	newPool := func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	admin, err := outbox.NewAdmin(newPool(), "outbox")
	require.NoError(t, err)
	admin.SetLogger(quietLogger())
	require.NoError(t, admin.Migrate(ctx))
	if mode.name == "Shard" || mode.name == "Cursor" {
		require.NoError(t, admin.EnableShards(ctx, 4))
	}
	if mode.name == "Cursor" {
		require.NoError(t, admin.EnableCursors(ctx))
	}

	var mu sync.Mutex
	var got []arrival
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		var p struct{ N int }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return outbox.Permanent(err)
		}
		mu.Lock()
		got = append(got, arrival{key: m.IDString(), id: m.ID, n: p.N, agg: m.AggregateID, at: time.Now()})
		mu.Unlock()
		return nil
	})
	runCtx, stopRun := context.WithCancel(ctx)
	var runs sync.WaitGroup
	for range 2 {
		cfg := mode.config(outbox.Config{Table: "outbox", Logger: quietLogger(), PollInterval: 50 * time.Millisecond,
			Lease: failoverLease, BatchSize: 20, Workers: 4})
		d, err := outbox.NewDispatcher(newPool(), sink, cfg)
		require.NoError(t, err)
		runs.Go(func() { _ = d.Run(runCtx) })
	}
	t.Cleanup(func() { stopRun(); runs.Wait() })

	// The producer commits one message per statement, 10 aggregates in
	// turn, through the same multi-host DSN.
	prodPool := newPool()
	var sent []produced
	stopProducing := make(chan struct{})
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for n := 0; ; n++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_, err := prodPool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
				VALUES ('order', $1, 'E', jsonb_build_object('n', $2::int))`, fmt.Sprintf("agg-%d", n%10), n)
			p := produced{uncertain: err != nil}
			if err == nil {
				p.acked = time.Now()
			}
			sent = append(sent, p)
		}
	}()

	time.Sleep(1500 * time.Millisecond) // let the relay run at full pace first
	// The standby falls behind, as an asynchronous one does under load:
	// the last commits of the primary (acknowledged if asynchronous, held
	// if synchronous) die with it, while the relay may have delivered them.
	resume, err := primary.HoldReplication(ctx)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, primary.Kill())
	killed := time.Now()
	require.NoError(t, resume())
	require.NoError(t, standby.Promote(ctx))
	promoted := time.Now()
	time.Sleep(1500 * time.Millisecond)
	close(stopProducing)
	<-producing

	// Drained: nothing pending, processing or dead on the new primary (as
	// status reads it: snapshot cursors do not write the status column).
	check := newPool()
	checkAdmin, err := outbox.NewAdmin(check, "outbox")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := checkAdmin.Status(ctx)
		return err == nil && st.Counts["pending"]+st.Counts["processing"]+st.Counts["dead"] == 0
	}, 60*time.Second, 50*time.Millisecond, "the new primary's rows are not all done")
	stopRun()
	runs.Wait()

	rows, err := check.Query(ctx, `SELECT (payload->>'n')::int, uid::text FROM outbox`)
	require.NoError(t, err)
	stored := map[int]string{} // n -> uid
	for rows.Next() {
		var n int
		var uid string
		require.NoError(t, rows.Scan(&n, &uid))
		stored[n] = uid
	}
	require.NoError(t, rows.Err())

	mu.Lock()
	defer mu.Unlock()
	first := map[int]arrival{}
	keyOf := map[string]int{}
	keysOfID := map[int64]map[string]bool{}
	byAgg := map[string][]int{}
	for _, a := range got {
		if other, seen := keyOf[a.key]; seen && other != a.n {
			require.Failf(t, "two messages under one identity", "messages %d and %d both sent as %q", other, a.n, a.key)
		}
		keyOf[a.key] = a.n
		if keysOfID[a.id] == nil {
			keysOfID[a.id] = map[string]bool{}
		}
		keysOfID[a.id][a.key] = true
		if _, seen := first[a.n]; !seen {
			first[a.n] = a
			byAgg[a.agg] = append(byAgg[a.agg], a.n)
		}
	}
	for n, uid := range stored {
		a, ok := first[n]
		require.True(t, ok, "message %d is on the new primary but was never delivered", n)
		require.Equal(t, uid, a.key, "message %d was sent under another identity than its uid", n)
	}
	if mode.ordered {
		for agg, ns := range byAgg {
			require.True(t, slices.IsSorted(ns), "aggregate %s first delivered out of commit order: %v", agg, ns)
		}
	}

	acked, lostByPostgres, uncertain, before, after := 0, 0, 0, 0, 0
	var worst time.Duration
	for n, p := range sent {
		if p.uncertain {
			uncertain++
			continue
		}
		acked++
		switch {
		case p.acked.Before(killed):
			before++
		case p.acked.After(promoted):
			after++
		}
		if _, ok := stored[n]; !ok {
			lostByPostgres++
			continue
		}
		if lat := first[n].at.Sub(later(p.acked, promoted)); lat > worst {
			worst = lat
		}
	}
	reused := 0 // ids delivered for two messages
	for _, keys := range keysOfID {
		if len(keys) > 1 {
			reused++
		}
	}
	t.Logf("%d acknowledged, %d uncertain, %d stored, %d deliveries (%d duplicates), %d acknowledged commits lost by the failover, "+
		"%d ids delivered for two messages; promoted %s after the kill; worst first delivery %s after its commit or the promotion",
		acked, uncertain, len(stored), len(got), len(got)-len(first), lostByPostgres, reused,
		promoted.Sub(killed).Round(time.Millisecond), worst.Round(time.Millisecond))
	// The failover is mid-stream whatever the machine's pace: commits on
	// both sides of it.
	require.Positive(t, before, "nothing was committed before the primary died")
	require.Positive(t, after, "nothing was committed after the promotion")
	if synchronous {
		require.Zero(t, lostByPostgres, "synchronous replication lost an acknowledged commit")
		require.Less(t, worst, failoverLatencyMax, "a message waited long past its commit")
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
