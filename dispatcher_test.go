package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// dispatchBroken is the naive relay the Dispatcher replaces, kept only to
// show its failure: SELECT ... FOR UPDATE SKIP LOCKED, COMMIT, then publish,
// then mark done. The row locks end at COMMIT, so while publish runs the
// rows belong to nobody and another worker selects them again.
func dispatchBroken(ctx context.Context, pool *pgxpool.Pool, table string, batch int, publish func(id int64)) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	rows, err := tx.Query(ctx, "SELECT id FROM "+table+
		" WHERE status = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED", batch)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		publish(id)
		if _, err := pool.Exec(ctx, "UPDATE "+table+" SET status = 'done', done_at = now() WHERE id = $1", id); err != nil {
			return err
		}
	}
	return nil
}

func TestBrokenDispatcherPublishesTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 3, "a")

	var mu sync.Mutex
	published := map[int64]int{}
	record := func(id int64) {
		mu.Lock()
		published[id]++
		mu.Unlock()
	}
	g := newGate()
	errA := make(chan error, 1)
	go func() {
		errA <- dispatchBroken(context.Background(), b.pool, b.quoted, 10, func(id int64) {
			record(id)
			if id == ids[0] {
				g.wait(t.Context(), id)
			}
		})
	}()
	require.Equal(t, ids[0], g.next(t), "worker A holds its first message mid-publish")

	// Worker B runs while A is still publishing: A's COMMIT freed the rows.
	require.NoError(t, dispatchBroken(t.Context(), b.pool, b.quoted, 10, record))
	g.Open()
	require.NoError(t, <-errA)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, each(ids, 2), published, "every message published by both workers")
}

func TestDispatcherHeldPublishIsNotClaimedTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 3, "a")

	g := newGate()
	recA := newRecorder(func(ctx context.Context, m *outbox.Message) error {
		g.wait(ctx, m.ID)
		return nil
	})
	recB := newRecorder(nil)
	dA := b.dispatcher(t, recA.Sink(), &outbox.Config{Owner: "A", Workers: 1, BatchSize: 10})
	sigB := newSignals()
	dB := b.dispatcher(t, recB.Sink(), &outbox.Config{Owner: "B", Workers: 1, BatchSize: 10, Hook: sigB})

	start(t, dA)
	require.Equal(t, ids[0], g.next(t), "A holds its first message mid-publish")
	start(t, dB)
	// Two claims: B's first one, and the one after it that found nothing.
	sigB.waitClaims(t, 2, "B did not claim twice")
	require.Zero(t, dB.Stats().Claimed, "B claimed rows A holds")

	g.Open()
	eventually(t, func() bool { return b.tryCount("done") == 3 })
	require.Equal(t, each(ids, 1), publishCounts(recA, recB))
	require.Empty(t, recB.IDs())
}

func TestDispatchersShareWorkExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgs := make([]outbox.NewMessage, 100)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprint(i%7), i)
	}
	ids := b.enqueue(t, msgs...)

	recs := make([]*recorder, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range recs {
		recs[i] = newRecorder(nil)
		d := b.dispatcher(t, recs[i].Sink(), &outbox.Config{
			Owner: fmt.Sprintf("dispatcher-%d", i), Workers: 3, BatchSize: 5,
		})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs[i] = d.Drain(ctx)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	require.Equal(t, each(ids, 1), publishCounts(recs...))
	for _, r := range b.rows(t) {
		require.Equal(t, "done", r.Status, "row %d", r.ID)
		require.Equal(t, 1, r.Attempts, "row %d", r.ID)
		require.Equal(t, int64(1), r.LeaseVersion, "row %d claimed more than once", r.ID)
		require.Nil(t, r.LeaseOwner)
		require.NotNil(t, r.DoneAt)
	}
}

func TestOrdered(t *testing.T) {
	t.Parallel()

	t.Run("OneAggregateFinalizesInIDOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueueN(t, 30, "order-1")

		rec := newRecorder(nil)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range errs {
			d := b.dispatcher(t, rec.Sink(), &outbox.Config{
				Owner: fmt.Sprintf("dispatcher-%d", i), Ordered: true, Workers: 2, BatchSize: 5,
			})
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				errs[i] = d.Drain(ctx)
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))

		require.Equal(t, ids, rec.IDs(), "publish order")
		rows, err := b.pool.Query(t.Context(), "SELECT id FROM "+b.quoted+" ORDER BY done_at, id")
		require.NoError(t, err)
		byDoneAt, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Equal(t, ids, byDoneAt, "finalize order")
		var ties int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.quoted+" AS a JOIN "+b.quoted+
			" AS b ON a.id < b.id WHERE a.done_at >= b.done_at").Scan(&ties))
		require.Zero(t, ties, "a later message finalized no later than an earlier one")
	})

	t.Run("RunAdvancesAnAggregateWithoutWaitingForThePoll", func(t *testing.T) {
		t.Parallel()
		for _, notify := range []bool{true, false} {
			t.Run(fmt.Sprintf("Notify=%v", notify), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				const n = 8
				ids := b.enqueueN(t, n, "order-1")
				// A publish outlasts the fetch cooldown, so the claim after
				// each partial batch finds the head still in flight.
				rec := newRecorder(func(ctx context.Context, _ *outbox.Message) error {
					select {
					case <-time.After(150 * time.Millisecond):
					case <-ctx.Done():
					}
					return nil
				})
				// Under Run, not Drain: with a 10s poll, an aggregate that
				// advanced one message per poll would need 70s for 8.
				d := b.dispatcher(t, rec.Sink(), &outbox.Config{
					Ordered: true, Workers: 2, BatchSize: 10, PollInterval: 10 * time.Second, DisableNotify: !notify,
				})
				start(t, d)
				require.Eventually(t, func() bool { return b.tryCount("done") == n }, 8*time.Second, 5*time.Millisecond,
					"the fetcher did not wake when a finalize freed the next head")
				require.Equal(t, ids, rec.IDs(), "publish order")
			})
		}
	})

	t.Run("DeadHeadBlocksOnlyItsAggregate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueue(t, msg("A", 1), msg("B", 1), msg("A", 2), msg("B", 2), msg("A", 3), msg("B", 3))
		a1, a2, a3 := ids[0], ids[2], ids[4]
		bIDs := []int64{ids[1], ids[3], ids[5]}

		rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
			if m.ID == a1 {
				return outbox.Permanent(errors.New("invalid payload"))
			}
			return nil
		})
		d := b.dispatcher(t, rec.Sink(), &outbox.Config{Ordered: true, Workers: 2, BatchSize: 10})

		// Drain returns although A2 and A3 are pending: only an operator
		// can unblock them.
		drain(t, d)
		require.Equal(t, append([]int64{a1}, bIDs...), slices.Sorted(slices.Values(rec.IDs())))
		require.Equal(t, "dead", b.row(t, a1).Status)
		for _, id := range bIDs {
			require.Equal(t, "done", b.row(t, id).Status)
		}
		for _, id := range []int64{a2, a3} {
			r := b.row(t, id)
			require.Equal(t, "pending", r.Status)
			require.Zero(t, r.LeaseVersion, "a message behind a dead head was claimed")
		}

		moved, err := b.admin.DeadSkip(t.Context(), a1)
		require.NoError(t, err)
		require.Equal(t, []int64{a1}, moved)
		drain(t, d)
		got := rec.IDs()
		require.Equal(t, []int64{a2, a3}, got[len(got)-2:], "the unblocked aggregate resumes in order")
		require.Equal(t, 6, b.countStatus(t, "done"), "the skipped head counts as done")
	})
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 6, "a")

	g := newGate()
	rec := newRecorder(func(ctx context.Context, m *outbox.Message) error {
		g.wait(ctx, m.ID)
		return nil
	})
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{Workers: 2, BatchSize: 10})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()

	inflight := map[int64]bool{g.next(t): true, g.next(t): true}
	cancel()
	require.Never(t, func() bool { return len(runErr) > 0 }, 200*time.Millisecond, 10*time.Millisecond,
		"Run returned while publishes were in flight")
	g.Open()
	select {
	case err := <-runErr:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return after shutdown")
	}

	require.Len(t, rec.IDs(), 2, "a publish started after shutdown began")
	for _, id := range ids {
		r := b.row(t, id)
		require.Equal(t, int64(1), r.LeaseVersion, "row %d was not claimed", id)
		require.Nil(t, r.LeaseOwner)
		require.Nil(t, r.LeaseUntil)
		if inflight[id] {
			require.Equal(t, "done", r.Status, "in-flight row %d", id)
			require.Equal(t, 1, r.Attempts)
			continue
		}
		require.Equal(t, "pending", r.Status, "unstarted row %d", id)
		require.Zero(t, r.Attempts, "unstarted row %d kept its attempt", id)
	}
	require.Zero(t, b.countStatus(t, "processing"))
	st := d.Stats()
	require.Equal(t, int64(2), st.Done)
	require.Equal(t, int64(4), st.Released)
}

// waitIdle waits until the dispatcher hooked to sig goes to sleep with its
// waiter registered: from then on a producer's commit wakes it. An event
// received earlier counts; discard sig.idle first to wait for a later one.
func waitIdle(t *testing.T, sig *signals) {
	t.Helper()
	waitFor(t, sig.idle, func(ev outbox.IdleEvent) bool { return ev.Registered }, "dispatcher never went idle with its waiter registered")
}

func TestWakeUp(t *testing.T) {
	t.Parallel()

	t.Run("NotifyWakesIdleDispatcher", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		delivered := make(chan time.Time, 1)
		rec := newRecorder(func(context.Context, *outbox.Message) error {
			delivered <- time.Now()
			return nil
		})
		sig := newSignals()
		d := b.dispatcher(t, rec.Sink(), &outbox.Config{PollInterval: 10 * time.Second, Hook: sig})
		start(t, d)
		waitIdle(t, sig)

		sent := time.Now()
		b.enqueueN(t, 1, "a")
		select {
		case got := <-delivered:
			require.Less(t, got.Sub(sent), time.Second, "delivery waited for the poll")
		case <-time.After(5 * time.Second):
			require.FailNow(t, "idle dispatcher was not woken")
		}
		eventually(t, func() bool { return d.Stats().Wakeups >= 1 })
	})

	t.Run("PollsWithoutNotify", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := newRecorder(nil)
		sig := newSignals()
		d := b.dispatcher(t, rec.Sink(), &outbox.Config{DisableNotify: true, PollInterval: 200 * time.Millisecond, Hook: sig})
		start(t, d)
		sig.waitClaims(t, 1, "no claim ran")

		ids := b.enqueueN(t, 1, "a")
		rec.waitLen(t, 1, 10*time.Second)
		require.Equal(t, 1, rec.Len())
		require.Equal(t, ids, rec.IDs())
		require.Zero(t, d.Stats().Wakeups)
		require.Zero(t, b.waiters(t), "a dispatcher that does not listen registered as a waiter")
	})

	t.Run("NoNotifyWithoutWaiters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		channel := b.schema + ".outbox"
		conn, err := pgx.Connect(t.Context(), testdb.DSN(t))
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{channel}.Sanitize())
		require.NoError(t, err)

		// A marker sent after each insert arrives first exactly when the
		// insert, committed earlier, sent nothing.
		nextPayload := func() string {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			n, err := conn.WaitForNotification(ctx)
			require.NoError(t, err)
			require.Equal(t, channel, n.Channel)
			return n.Payload
		}
		marker := func() { b.exec(t, "SELECT pg_notify($1, 'marker')", channel) }
		waiters := pgx.Identifier{b.schema, "outbox_waiters"}.Sanitize()

		b.enqueueN(t, 1, "a")
		marker()
		require.Equal(t, "marker", nextPayload(), "an insert notified with no waiter")

		b.exec(t, "INSERT INTO "+waiters+" (owner, wait_until) VALUES ('crashed', now() - interval '1 second')")
		b.enqueueN(t, 1, "a")
		marker()
		require.Equal(t, "marker", nextPayload(), "an insert notified for an expired waiter")

		b.exec(t, "INSERT INTO "+waiters+" (owner, wait_until) VALUES ('idle', now() + interval '1 minute')")
		b.enqueueN(t, 1, "a")
		marker()
		require.Empty(t, nextPayload(), "an insert did not notify a waiting dispatcher")
		require.Equal(t, "marker", nextPayload())
	})
}

func (b *testBundle) waiters(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT count(*) FROM "+pgx.Identifier{b.schema, "outbox_waiters"}.Sanitize()).Scan(&n))
	return n
}

func TestLostLeaseIsReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueueN(t, 1, "a")

	g := newGate()
	rec := newRecorder(func(ctx context.Context, m *outbox.Message) error {
		g.wait(ctx, m.ID)
		return nil
	})
	sig := newSignals()
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{Workers: 1, BatchSize: 1, Hook: sig})
	start(t, d)
	id := g.next(t)

	// A competing claimer took the row over: a new fencing token.
	b.exec(t, "UPDATE "+b.quoted+" SET lease_version = lease_version + 1 WHERE id = $1", id)
	taken := b.row(t, id)
	g.Open()
	sig.waitSettled(t, outbox.OutcomeLeaseLost, "the finalize was not fenced off")
	require.Equal(t, int64(1), d.Stats().LeaseLost)

	require.Equal(t, taken, b.row(t, id), "the stale finalize wrote to the row")
	require.Equal(t, "processing", taken.Status)
	st := d.Stats()
	require.Zero(t, st.Done)
	require.Equal(t, int64(1), st.Finalizes)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	sink := newRecorder(nil).Sink()

	for _, tc := range []struct {
		field string
		cfg   outbox.Config
	}{
		{"Workers", outbox.Config{Workers: -1}},
		{"BatchSize", outbox.Config{BatchSize: -1}},
		{"PublishTimeout", outbox.Config{Lease: 10 * time.Second, PublishTimeout: 5*time.Second + time.Millisecond}},
		{"RetryCap", outbox.Config{RetryBase: 2 * time.Second, RetryCap: time.Second}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			_, err := outbox.NewDispatcher(pool, sink, &tc.cfg)
			require.ErrorContains(t, err, tc.field)
		})
	}

	t.Run("ZeroMeansDefault", func(t *testing.T) {
		t.Parallel()
		d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{Lease: 10 * time.Second, PublishTimeout: 5 * time.Second})
		require.NoError(t, err)
		cfg := d.Config()
		require.Equal(t, outbox.WorkersDefault, cfg.Workers)
		require.Equal(t, outbox.BatchSizeDefault, cfg.BatchSize)
		require.Equal(t, outbox.TableDefault, cfg.Table)
	})

	t.Run("NilPoolOrSink", func(t *testing.T) {
		t.Parallel()
		_, err := outbox.NewDispatcher(nil, sink, nil)
		require.Error(t, err)
		_, err = outbox.NewDispatcher(pool, nil, nil)
		require.Error(t, err)
	})

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		schema := testdb.NewSchema(t)
		d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{Table: schema + ".missing", Logger: quietLogger()})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		require.ErrorIs(t, d.Run(ctx), outbox.ErrTableMissing)
		require.ErrorIs(t, d.Drain(ctx), outbox.ErrTableMissing)
		require.ErrorIs(t, d.Start(ctx), outbox.ErrTableMissing)
		require.NoError(t, d.Stop(), "Stop after a failed Start")
	})

	// A SIGTERM while the dispatcher reads the catalogs is a clean stop:
	// nothing was claimed, nothing failed.
	t.Run("StoppedWhileStarting", func(t *testing.T) {
		t.Parallel()
		schema := testdb.NewSchema(t)
		table := schema + ".outbox"
		a, err := outbox.NewAdmin(pool, table)
		require.NoError(t, err)
		require.NoError(t, a.Migrate(t.Context()))
		for _, mode := range []outbox.LeaseMode{outbox.LeaseRows, outbox.LeaseShards, outbox.LeaseCursor} {
			d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{Table: table, LeaseMode: mode, Logger: quietLogger()})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			require.NoError(t, d.Run(ctx), mode)
			require.NoError(t, d.Drain(ctx), mode)
		}
	})
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	d := b.dispatcher(t, rec.Sink(), nil)
	require.NoError(t, d.Stop(), "Stop before Start")

	for i := range 3 {
		require.NoError(t, d.Start(t.Context()))
		require.Error(t, d.Start(t.Context()), "second Start while running")
		ids := b.enqueueN(t, 1, "a")
		rec.waitLen(t, i+1, 10*time.Second)
		require.Equal(t, 1, publishCounts(rec)[ids[0]])
		require.NoError(t, d.Stop())
		require.NoError(t, d.Stop(), "second Stop")
	}
	require.Equal(t, 3, b.countStatus(t, "done"))
}
