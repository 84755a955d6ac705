package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// listenerPool is a pool whose sessions carry a name of the test's own, so
// that the test can count the sessions listening.
func listenerPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	name := fmt.Sprintf("listener-test-%d", time.Now().UnixNano())
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, name
}

// listening counts the sessions named app whose last statement was a
// LISTEN or UNLISTEN: the listening connections.
func listening(t *testing.T, app string) int {
	t.Helper()
	var n int
	require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query ~ '^(UN)?LISTEN '`, app).Scan(&n))
	return n
}

// registered waits until the table's dispatcher is registered as idle: a
// producer's statement that begins after this notifies it. (One that began
// before and commits after the dispatcher's next look is found by a poll.)
func registered(t *testing.T, b *testBundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		var ok bool
		err := testdb.Pool(t).QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM `+
			pgx.Identifier{b.schema, "outbox_waiters"}.Sanitize()+` WHERE wait_until > now())`).Scan(&ok)
		return err == nil && ok
	}, 10*time.Second, 10*time.Millisecond, "the dispatcher registers as idle")
}

// Dispatchers of several tables given one Listener share its one
// connection, and each is woken by its own table's notifications: with a
// poll interval of a minute, only a notification delivers a message
// within seconds. A table whose dispatcher starts later is heard too; the
// connection closes with the last dispatcher.
func TestListenerSharedByTables(t *testing.T) {
	t.Parallel()
	pool, app := listenerPool(t)
	listener := outbox.NewListener(pool, testLog(t))
	var bundles []*testBundle
	var recs []*recorder
	var stops []func()
	startOne := func() {
		b := setup(t)
		b.pool = pool
		rec := newRecorder(nil)
		d := b.dispatcher(t, rec.Sink(), &outbox.Config{Listener: listener, PollInterval: time.Minute, Logger: testLog(t)})
		require.NoError(t, d.Start(t.Context()))
		bundles, recs, stops = append(bundles, b), append(recs, rec), append(stops, func() { require.NoError(t, d.Stop()) })
	}
	for range 4 {
		startOne()
	}
	require.Eventually(t, func() bool { return listening(t, app) == 1 }, 10*time.Second, 20*time.Millisecond,
		"one connection listens for the four tables")

	// Each dispatcher registers as idle once it heard its channel, and
	// sleeps a minute: only its notification wakes it.
	for i, b := range bundles {
		registered(t, b)
		ids := b.enqueueN(t, 2, fmt.Sprintf("t%d", i))
		recs[i].waitLen(t, 2, 10*time.Second, "table %d", i)
		require.ElementsMatch(t, ids, recs[i].IDs())
	}
	for i, b := range bundles {
		registered(t, b)
		b.enqueueN(t, 1, fmt.Sprintf("t%d", i))
	}
	for i := range bundles {
		recs[i].waitLen(t, 3, 10*time.Second, "table %d woken by its notification", i)
	}

	startOne()
	registered(t, bundles[4])
	bundles[4].enqueueN(t, 1, "late")
	recs[4].waitLen(t, 1, 10*time.Second, "a table started later is heard")
	require.Equal(t, 1, listening(t, app))

	for _, stop := range stops {
		stop()
	}
	require.Eventually(t, func() bool { return listening(t, app) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the connection closes with the last dispatcher")
}

// A shared listening connection that fails (its session terminated) is
// opened again, and its dispatchers are woken by notifications after.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	pool, app := listenerPool(t)
	listener := outbox.NewListener(pool, quietLogger())
	b := setup(t)
	b.pool = pool
	rec := newRecorder(nil)
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{Listener: listener, PollInterval: time.Minute})
	start(t, d)
	require.Eventually(t, func() bool { return listening(t, app) == 1 }, 10*time.Second, 20*time.Millisecond)
	var killed bool
	require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query ~ '^(UN)?LISTEN '`, app).Scan(&killed))
	require.True(t, killed)
	// The new connection's start makes the dispatcher look again, so
	// what is committed meanwhile goes out; afterwards a notification
	// wakes it.
	require.Eventually(t, func() bool { return listening(t, app) == 1 }, 10*time.Second, 20*time.Millisecond)
	b.enqueueN(t, 1, "a")
	rec.waitLen(t, 1, 10*time.Second)
	registered(t, b)
	b.enqueueN(t, 1, "a")
	rec.waitLen(t, 2, 10*time.Second, "woken through the new connection")
}

// Two dispatchers of one table on one Listener are both woken; one
// stopping leaves the other listening.
func TestListenerTwoDispatchersOfOneTable(t *testing.T) {
	t.Parallel()
	pool, app := listenerPool(t)
	listener := outbox.NewListener(pool, quietLogger())
	b := setup(t)
	b.pool = pool
	rec := newRecorder(nil)
	cfg := &outbox.Config{Listener: listener, PollInterval: time.Minute}
	d1 := b.dispatcher(t, rec.Sink(), cfg)
	d2 := b.dispatcher(t, rec.Sink(), cfg)
	require.NoError(t, d1.Start(context.Background()))
	start(t, d2)
	require.Eventually(t, func() bool { return listening(t, app) == 1 && d1.Stats().Claims > 0 && d2.Stats().Claims > 0 },
		10*time.Second, 20*time.Millisecond)
	require.NoError(t, d1.Stop())
	registered(t, b)
	b.enqueueN(t, 1, "a")
	rec.waitLen(t, 1, 10*time.Second, "the other dispatcher still hears the table")
	require.Equal(t, 1, listening(t, app))
}

// syncBuffer is a log destination a test prints when it fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func testLog(t *testing.T) *slog.Logger {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			buf.mu.Lock()
			t.Log(buf.b.String())
			buf.mu.Unlock()
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
