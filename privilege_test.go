package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// loginRole creates a role that may log in (the test server trusts local
// connections), dropped with everything granted to it when the test ends,
// and returns its quoted name and a pool connected as it. The name needs
// quoting, so every message must quote it.
func loginRole(t *testing.T, b *testBundle) (string, *pgxpool.Pool) {
	t.Helper()
	name := "r-" + b.schema
	quoted := pgx.Identifier{name}.Sanitize()
	b.exec(t, "CREATE ROLE "+quoted+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = b.pool.Exec(ctx, "DROP OWNED BY "+quoted)
		_, err := b.pool.Exec(ctx, "DROP ROLE "+quoted)
		require.NoError(t, err)
	})
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = name
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return quoted, pool
}

// TestDispatcherRefusesRoleWithoutPrivileges: a dispatcher connected as a
// role that may only read the table stops before claiming anything, with a
// *PrivilegeError naming each missing privilege and its object; the GRANTs
// it proposes are enough to relay. Before, Drain logged "claim failed;
// retrying" until its context ended.
func TestDispatcherRefusesRoleWithoutPrivileges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role, pool := loginRole(t, b)
	schema := pgx.Identifier{b.schema}.Sanitize()
	waiters := pgx.Identifier{b.schema, "outbox_waiters"}.Sanitize()
	attempts := pgx.Identifier{b.schema, "outbox_attempts"}.Sanitize()
	dispatchers := pgx.Identifier{b.schema, "outbox_dispatchers"}.Sanitize()
	pauses := pgx.Identifier{b.schema, "outbox_pauses"}.Sanitize()
	b.exec(t, "GRANT SELECT ON "+b.quoted+" TO "+role)
	ids := b.enqueueN(t, 2, "a")
	// The first delivery of the first message fails, so the relay records
	// an attempt.
	var failed atomic.Bool
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		if m.ID == ids[0] && failed.CompareAndSwap(false, true) {
			return outbox.Retryable(errors.New("receiver busy"))
		}
		return nil
	})
	newDispatcher := func(cfg outbox.Config) *outbox.Dispatcher {
		cfg.Table, cfg.Logger, cfg.PollInterval = b.table, quietLogger(), 50*time.Millisecond
		d, err := outbox.NewDispatcher(pool, rec.Sink(), &cfg)
		require.NoError(t, err)
		return d
	}
	refused := func(d *outbox.Dispatcher) *outbox.PrivilegeError {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := d.Drain(ctx)
		require.NoError(t, ctx.Err(), "Drain returned only because its context ended")
		require.True(t, outbox.IsPrivilegeError(err), "%v", err)
		var pe *outbox.PrivilegeError
		require.True(t, errors.As(err, &pe))
		err = d.Start(t.Context())
		require.ErrorIs(t, err, &outbox.PrivilegeError{}, "Start refuses at once too")
		require.Equal(t, pe.Error(), err.Error())
		return pe
	}

	// No USAGE on the schema: named first, then the table, waiters and
	// attempts privileges.
	pe := refused(newDispatcher(outbox.Config{}))
	require.Equal(t, `outbox: role `+role+` lacks USAGE on schema `+schema+`; UPDATE on table `+b.quoted+
		`; SELECT, INSERT, UPDATE, DELETE on table `+waiters+`; SELECT, INSERT, DELETE on table `+attempts+
		`; SELECT, INSERT, UPDATE, DELETE on table `+dispatchers+`; SELECT on table `+pauses, pe.Error())
	b.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+dispatchers+" TO "+role)
	b.exec(t, "GRANT SELECT ON "+pauses+" TO "+role)

	// Polling only, it still clears its waiter row with every claim;
	// recording no attempt history, it needs nothing on that table.
	noHistory := outbox.Config{DisableNotify: true, AttemptHistory: outbox.NoAttemptHistory}
	b.exec(t, "GRANT USAGE ON SCHEMA "+schema+" TO "+role)
	pe = refused(newDispatcher(noHistory))
	require.Equal(t, `outbox: role `+role+` lacks UPDATE on table `+b.quoted+`; SELECT, DELETE on table `+waiters, pe.Error())
	b.exec(t, "GRANT SELECT, DELETE ON "+waiters+" TO "+role)
	pe = refused(newDispatcher(noHistory))
	require.Equal(t, `outbox: role `+role+` lacks UPDATE on table `+b.quoted, pe.Error())
	require.Equal(t, []outbox.MissingPrivileges{{Privileges: []string{"UPDATE"}, ObjectType: "table", Object: b.quoted}}, pe.Missing)
	require.Equal(t, []string{"GRANT UPDATE ON TABLE " + b.quoted + " TO " + role + ";"}, pe.Grants())
	for _, r := range b.rows(t) {
		require.Equal(t, "pending", r.Status, "nothing was claimed")
		require.Zero(t, r.Attempts)
	}

	// The proposed GRANTs, run by the owner, are enough: it relays, with
	// LISTEN and its waiters table, and records the failed attempt.
	pe = refused(newDispatcher(outbox.Config{}))
	b.exec(t, strings.Join(pe.Grants(), " "))
	drain(t, newDispatcher(outbox.Config{RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond}))
	require.Equal(t, map[int64]int{ids[0]: 2, ids[1]: 1}, publishCounts(rec))
	h, err := b.admin.Attempts(t.Context(), ids[0])
	require.NoError(t, err)
	require.Len(t, h, 1)
	require.Equal(t, outbox.OutcomeRetry, h[0].Outcome)
}

// TestCheckAccessRetentionAndColumnGrants: retention needs DELETE on the
// table and on its attempts table, which CheckAccess names; UPDATE granted
// on columns only counts as held (a role granted just the columns it
// writes is not refused).
func TestCheckAccessRetentionAndColumnGrants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role, pool := loginRole(t, b)
	b.exec(t, "GRANT USAGE ON SCHEMA "+pgx.Identifier{b.schema}.Sanitize()+" TO "+role)
	b.exec(t, "GRANT SELECT, UPDATE (status, attempts) ON "+b.quoted+" TO "+role)
	b.exec(t, "GRANT SELECT, DELETE ON "+pgx.Identifier{b.schema, "outbox_waiters"}.Sanitize()+" TO "+role)
	b.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+pgx.Identifier{b.schema, "outbox_dispatchers"}.Sanitize()+" TO "+role)
	b.exec(t, "GRANT SELECT ON "+pgx.Identifier{b.schema, "outbox_pauses"}.Sanitize()+" TO "+role)
	admin, err := outbox.NewAdmin(pool, b.table)
	require.NoError(t, err)
	acc, err := admin.CheckAccess(t.Context(), &outbox.AccessOpts{NoNotify: true, Retention: true})
	require.NoError(t, err)
	require.Equal(t, b.schema, acc.Schema)
	require.Equal(t, []string{"DELETE"}, acc.MissingTable)
	require.Equal(t, []string{"SELECT", "INSERT", "DELETE"}, acc.MissingAttempts)
	attempts := pgx.Identifier{b.schema, "outbox_attempts"}.Sanitize()
	require.EqualError(t, acc.Err(), `outbox: role `+role+` lacks DELETE on table `+b.quoted+`; SELECT, INSERT, DELETE on table `+attempts)

	// Without the history, the purge still deletes the history of what it
	// deletes.
	acc, err = admin.CheckAccess(t.Context(), &outbox.AccessOpts{NoNotify: true, Retention: true, NoHistory: true})
	require.NoError(t, err)
	require.EqualError(t, acc.Err(), `outbox: role `+role+` lacks DELETE on table `+b.quoted+`; SELECT, DELETE on table `+attempts)

	acc, err = admin.CheckAccess(t.Context(), &outbox.AccessOpts{NoNotify: true, NoHistory: true})
	require.NoError(t, err)
	require.NoError(t, acc.Err())
}
