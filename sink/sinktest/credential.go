package sinktest

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// Credential is a credential a sink authenticates with, which the broker is
// made to refuse and then to accept again: a rotated password, a revoked
// user, an expired token.
type Credential struct {
	// New returns the sink, authenticating with the credential, and a
	// Receiver of its destination that does not use the credential.
	New func(t *testing.T) (outbox.Sink, Receiver)
	// Break makes the broker refuse the credential, the sink's live
	// sessions included (they are closed, or refused their next request).
	Break func(t *testing.T)
	// Heal makes the broker accept the credential again.
	Heal func(t *testing.T)
}

// credentialMessages is how many messages CredentialHeals sends: as many as
// the dispatcher has workers, so every one of them is refused.
const credentialMessages = 5

// CredentialHeals runs a dispatcher with the sink on a table of its own
// (PostgreSQL from testdb): the credential breaks, messages are enqueued
// and refused (the sink must report [outbox.Unavailable], so the dispatcher
// pauses and spends no attempt on the refusals), the credential heals, and
// every message must arrive within a few of the paused sink's probe
// intervals, none dead.
// The package's TestMain must be [testdb.Main].
func CredentialHeals(t *testing.T, c Credential) {
	t.Helper()
	table := testdb.NewSchema(t) + ".outbox"
	pool := testdb.Pool(t)
	admin, err := outbox.NewAdmin(pool, table)
	require.NoError(t, err)
	require.NoError(t, admin.Migrate(t.Context()))

	sink, recv := c.New(t)
	t.Cleanup(func() { _ = sink.Close() })
	c.Break(t)
	broken := time.Now()
	paused := &pauseSignal{ch: make(chan outbox.SinkPauseEvent, 64)}
	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{
		Table: table, Workers: credentialMessages, PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hook: paused,
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop()) })

	keys := enqueueFive(t, pool, table)
	select {
	case ev := <-paused.ch:
		require.True(t, ev.Paused)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the sink never reported itself unavailable", "stats: %+v", d.Stats())
	}
	// A broker may take a moment to apply the break to a live session: a
	// message or two may still get through, or fail as retryable.
	require.Eventually(t, func() bool { return countStatus(t, pool, table, "processing") == 0 },
		10*time.Second, 10*time.Millisecond, "the refused messages did not go back to pending")
	require.Less(t, countStatus(t, pool, table, "done"), credentialMessages, "the broker never refused the credential")
	brokenFor := time.Since(broken)
	c.Heal(t)
	healed := time.Now()
	// Probes come SinkPauseMin apart, doubled per refusal (1s, 2s, 4s):
	// this allows for two probes refused while the fix was on its way, and
	// for the client's reconnect.
	got := recv.Receive(t, credentialMessages, 8*outbox.SinkPauseMin)
	st := d.Stats()
	t.Logf("broken for %s; delivered %d messages %s after the credential healed; %d pauses, %d refusals, %d retries",
		brokenFor.Round(time.Millisecond), len(got), time.Since(healed).Round(time.Millisecond), st.SinkPauses, st.Deferred, st.Retried)
	seen := map[string]bool{}
	for _, r := range got {
		seen[r.ID] = true
	}
	for _, key := range keys {
		require.True(t, seen[key], "message %s was not delivered after the credential healed (got %d)", key, len(got))
	}
	require.Eventually(t, func() bool { return countStatus(t, pool, table, "done") == credentialMessages },
		10*time.Second, 10*time.Millisecond, "the delivered messages were not finalized")
	require.Zero(t, countStatus(t, pool, table, "dead"), "a message went dead over a credential")
	require.Positive(t, d.Stats().SinkPauses, "the refusal did not pause the sink")
}

func enqueueFive(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, table string) []string {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	msgs := make([]outbox.NewMessage, credentialMessages)
	for i := range msgs {
		msgs[i] = outbox.NewMessage{AggregateType: "order", AggregateID: strconv.Itoa(i), EventType: "OrderPlaced", Payload: map[string]int{"n": i}}
	}
	ids, err := outbox.Producer{Table: table}.Enqueue(t.Context(), tx, msgs...)
	require.NoError(t, err)
	// The keys the sinks send: each row's identity.
	rows, err := tx.Query(t.Context(), "SELECT uid::text FROM "+table+" WHERE id = ANY($1) ORDER BY id", ids)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, keys, len(ids))
	require.NoError(t, tx.Commit(t.Context()))
	return keys
}

func countStatus(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table, status string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+table+" WHERE status = $1", status).Scan(&n))
	return n
}

// pauseSignal is a hook that sends each pause and resumption.
type pauseSignal struct {
	outbox.BaseHook
	ch chan outbox.SinkPauseEvent
}

func (p *pauseSignal) OnSinkPause(ev outbox.SinkPauseEvent) {
	select {
	case p.ch <- ev:
	default:
	}
}
