package pgcluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A standby streams what the primary commits, refuses writes until it is
// promoted, and after the primary dies and it is promoted holds every
// commit the primary acknowledged under synchronous replication.
func TestStandbyPromote(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		name := "Asynchronous"
		if sync {
			name = "Synchronous"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p, err := Start(ctx, &Options{Logf: t.Logf})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Stop(context.Background()) })
			_, err = connect(ctx, t, p).Exec(ctx, "CREATE TABLE survivor (id int PRIMARY KEY, v text)")
			require.NoError(t, err)

			s, err := p.StartStandby(ctx, &StandbyOptions{Synchronous: sync})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			require.NotEqual(t, p.Port, s.Port)

			var mode string
			require.NoError(t, connect(ctx, t, p).QueryRow(ctx,
				"SELECT sync_state FROM pg_stat_replication").Scan(&mode))
			if sync {
				require.Equal(t, "sync", mode)
			} else {
				require.Equal(t, "async", mode)
			}
			_, err = connect(ctx, t, p).Exec(ctx, "INSERT INTO survivor VALUES (1, 'still here')")
			require.NoError(t, err)
			_, err = connect(ctx, t, s).Exec(ctx, "INSERT INTO survivor VALUES (2, 'x')")
			require.ErrorContains(t, err, "read-only", "a standby refuses writes")

			require.NoError(t, p.Kill())
			require.NoError(t, s.Promote(ctx))
			if !sync {
				// Asynchronous: the row may not have arrived; wait for it
				// to be sure the rest of the test checks the promotion.
				require.Eventually(t, func() bool {
					var n int
					return connect(ctx, t, s).QueryRow(ctx, "SELECT count(*) FROM survivor").Scan(&n) == nil && n == 1
				}, 10*time.Second, 50*time.Millisecond)
			}
			requireRow(ctx, t, s)
			_, err = connect(ctx, t, s).Exec(ctx, "INSERT INTO survivor VALUES (2, 'after')")
			require.NoError(t, err, "the promoted standby accepts writes")
		})
	}
}

// While replication is held, the standby receives nothing the primary
// commits; once resumed it catches up.
func TestHoldReplication(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Start(ctx, &Options{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	s, err := p.StartStandby(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	resume, err := p.HoldReplication(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resume() }) // a stopped process would hold up the primary's stop
	pc := connect(ctx, t, p)
	_, err = pc.Exec(ctx, "CREATE TABLE held (id int)")
	require.NoError(t, err)
	var committed string
	require.NoError(t, pc.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&committed))
	behind := func() bool {
		var b bool
		require.NoError(t, connect(ctx, t, s).QueryRow(ctx,
			"SELECT coalesce(pg_last_wal_receive_lsn() < $1::pg_lsn, true)", committed).Scan(&b))
		return b
	}
	require.True(t, behind(), "the standby received WAL while replication was held")
	require.NoError(t, resume())
	require.Eventually(t, func() bool { return !behind() }, 30*time.Second, 50*time.Millisecond, "the standby never caught up")
}
