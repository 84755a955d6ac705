package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// TestPoolerHint: the errors a transaction pooler provokes, produced for
// real by PostgreSQL (PREPARE of a name the session already holds: 42P05;
// EXECUTE of one it never prepared: 26000), get the fix appended, its
// SQLSTATE still visible; any other error passes unchanged.
func TestPoolerHint(t *testing.T) {
	conn, err := pgx.Connect(t.Context(), testdb.DSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	_, err = conn.Exec(t.Context(), "PREPARE stmtcache_1 AS SELECT 1")
	require.NoError(t, err)

	_, exists := conn.Exec(t.Context(), "PREPARE stmtcache_1 AS SELECT 1")
	_, missing := conn.Exec(t.Context(), "EXECUTE stmtcache_2")
	for code, err := range map[string]error{"42P05": exists, "26000": missing} {
		hinted := poolerHint(err)
		require.Contains(t, hinted.Error(), "(SQLSTATE "+code+")")
		require.Contains(t, hinted.Error(), "add default_query_exec_mode=exec to the DSN, and run with --no-notify")
		require.NotContains(t, hinted.Error(), "\n")
	}

	_, other := conn.Exec(t.Context(), "SELECT 1/0")
	require.Error(t, other)
	require.Equal(t, other, poolerHint(other))
	plain := errors.New("dial tcp: connection refused")
	require.Equal(t, plain, poolerHint(plain))
	require.False(t, strings.Contains(poolerHint(plain).Error(), "default_query_exec_mode"))
}
