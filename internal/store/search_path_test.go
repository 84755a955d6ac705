package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// TestWakeTriggerIgnoresProducerSearchPath: the table is migrated by its
// unqualified name under the migrator's search_path; producers whose
// search_path differs still get the trigger that reads the table's own
// waiters. Before, the function body named outbox_waiters unqualified: a
// producer without it on its path failed every INSERT, and one with a
// same-named table earlier on its path read that table instead.
func TestWakeTriggerIgnoresProducerSearchPath(t *testing.T) {
	t.Parallel()
	home := testdb.NewSchema(t)
	st, err := store.New("outbox")
	require.NoError(t, err)
	migrator := searchPathPool(t, home)
	require.NoError(t, st.Migrate(t.Context(), migrator))
	qualified, err := store.New(home + ".outbox")
	require.NoError(t, err)

	t.Run("NoWaitersOnItsPath", func(t *testing.T) {
		t.Parallel()
		producer := searchPathPool(t, testdb.NewSchema(t))
		insertOne(t, producer, qualified)
	})

	t.Run("SameNamedTableEarlierOnItsPath", func(t *testing.T) {
		t.Parallel()
		decoy := testdb.NewSchema(t)
		_, err := testdb.Pool(t).Exec(t.Context(), "CREATE TABLE "+pgx.Identifier{decoy, "outbox_waiters"}.Sanitize()+
			" (owner text PRIMARY KEY, wait_until timestamptz NOT NULL)")
		require.NoError(t, err)
		producer := searchPathPool(t, decoy)

		listener := listen(t, home+".outbox")
		require.NoError(t, st.Wait(t.Context(), migrator, "w", time.Minute), "a dispatcher waits, in the table's schema")
		insertOne(t, producer, qualified)

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(ctx)
		require.NoError(t, err, "the producer's INSERT notified the waiting dispatcher")
		require.Equal(t, home+".outbox", n.Channel)
	})
}

func insertOne(t *testing.T, producer *pgxpool.Pool, st *store.Store) {
	t.Helper()
	rows, err := producer.Query(t.Context(), st.InsertSQL(1), "o", "a", "e", `{}`, nil)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 1)
}

// listen returns a connection listening on channel, released at cleanup.
func listen(t *testing.T, channel string) *pgxpool.Conn {
	t.Helper()
	c, err := testdb.Pool(t).Acquire(t.Context())
	require.NoError(t, err)
	_, err = c.Exec(t.Context(), "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := c.Exec(context.Background(), "UNLISTEN *")
		require.NoError(t, err)
		c.Release()
	})
	return c
}
