package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// MatchTables finds the outbox tables a pattern names: * is any run of
// characters, LIKE's wildcards only themselves; the tables migrate creates
// beside an outbox are not outboxes; a bad pattern is refused.
func TestMatchTables(t *testing.T) {
	t.Parallel()
	b := setup(t) // a migrated outbox, with its companion tables
	pool := testdb.Pool(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE `+b.schema+`.notes (id bigint)`)
	require.NoError(t, err)

	got, err := outbox.MatchTables(t.Context(), pool, b.schema+".*")
	require.NoError(t, err)
	require.Equal(t, []string{b.table}, got, "only the outbox, not its companions nor another table")

	got, err = outbox.MatchTables(t.Context(), pool, b.schema+".out*")
	require.NoError(t, err)
	require.Equal(t, []string{b.table}, got)

	// The schema is t_xxxx: a LIKE wildcard in the pattern matches nothing.
	got, err = outbox.MatchTables(t.Context(), pool, "t"+"%"+b.schema[2:]+".outbox")
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = outbox.MatchTables(t.Context(), pool, "t?"+b.schema[2:]+".outbox")
	require.NoError(t, err)
	require.Empty(t, got)

	got, err = outbox.MatchTables(t.Context(), pool, "no_such_schema_*.outbox")
	require.NoError(t, err)
	require.Empty(t, got)

	for _, bad := range []string{"", ".outbox", "a.", "a.b.c"} {
		_, err := outbox.MatchTables(t.Context(), pool, bad)
		require.Error(t, err, bad)
	}
}
