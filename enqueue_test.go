package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// stored is an outbox row's producer-written columns.
type stored struct {
	ID            int64  `db:"id"`
	AggregateType string `db:"aggregate_type"`
	AggregateID   string `db:"aggregate_id"`
	EventType     string `db:"event_type"`
	Payload       string `db:"payload"`
	Status        string `db:"status"`
}

func (b *testBundle) stored(t *testing.T) []stored {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT id, aggregate_type, aggregate_id, event_type, payload::text AS payload, status FROM "+
		b.quoted+" ORDER BY id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[stored])
	require.NoError(t, err)
	return out
}

// threeKinds has one payload of each kind Enqueue accepts.
var threeKinds = []outbox.NewMessage{
	{AggregateType: "order", AggregateID: "1", EventType: "OrderCreated", Payload: json.RawMessage(`{"total":1200}`)},
	{AggregateType: "order", AggregateID: "1", EventType: "OrderPaid", Payload: []byte(`{"paid":true}`)},
	{AggregateType: "user", AggregateID: "u-7", EventType: "UserRenamed", Payload: struct {
		Name string `json:"name"`
	}{"Ada"}},
}

var threeKindsJSON = []string{`{"total":1200}`, `{"paid":true}`, `{"name":"Ada"}`}

func requireStoredThreeKinds(t *testing.T, b *testBundle, ids []int64) {
	t.Helper()
	require.Len(t, ids, 3)
	require.Less(t, ids[0], ids[1])
	require.Less(t, ids[1], ids[2])
	rows := b.stored(t)
	require.Len(t, rows, 3)
	for i, r := range rows {
		m := threeKinds[i]
		require.Equal(t, ids[i], r.ID, "ids come back in the order of the messages")
		require.Equal(t, m.AggregateType, r.AggregateType)
		require.Equal(t, m.AggregateID, r.AggregateID)
		require.Equal(t, m.EventType, r.EventType)
		require.JSONEq(t, threeKindsJSON[i], r.Payload)
		require.Equal(t, "pending", r.Status)
	}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()

	t.Run("PgxTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, threeKinds...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(t.Context()))
		requireStoredThreeKinds(t, b, ids)
	})

	t.Run("PgxRollback", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, threeKinds...)
		require.NoError(t, err)
		require.Len(t, ids, 3)
		require.NoError(t, tx.Rollback(t.Context()))
		require.Empty(t, b.stored(t))
	})

	t.Run("DatabaseSQLTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		db := openSQL(t)

		tx, err := db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		_, err = outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, threeKinds...)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		require.Empty(t, b.stored(t))

		tx, err = db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, threeKinds...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		requireStoredThreeKinds(t, b, ids)
	})

	t.Run("DefaultTableThroughSearchPath", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
		_, err = tx.Exec(t.Context(), "SELECT set_config('search_path', $1, true)", b.schema)
		require.NoError(t, err)
		ids, err := outbox.Enqueue(t.Context(), tx, threeKinds...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(t.Context()))
		requireStoredThreeKinds(t, b, ids)
	})

	t.Run("InvalidMessagesInsertNothing", func(t *testing.T) {
		t.Parallel()
		valid := threeKinds[0]
		for _, tc := range []struct {
			name string
			msg  outbox.NewMessage
			want string
		}{
			{"InvalidRawJSON", outbox.NewMessage{AggregateType: "o", AggregateID: "1", EventType: "E", Payload: json.RawMessage(`{"a":`)}, "not valid JSON"},
			{"InvalidBytes", outbox.NewMessage{AggregateType: "o", AggregateID: "1", EventType: "E", Payload: []byte(`nope`)}, "not valid JSON"},
			{"Unmarshallable", outbox.NewMessage{AggregateType: "o", AggregateID: "1", EventType: "E", Payload: func() {}}, "payload"},
			{"NilPayload", outbox.NewMessage{AggregateType: "o", AggregateID: "1", EventType: "E"}, "payload is required"},
			{"NoAggregateType", outbox.NewMessage{AggregateID: "1", EventType: "E", Payload: 1}, "AggregateType"},
			{"NoAggregateID", outbox.NewMessage{AggregateType: "o", EventType: "E", Payload: 1}, "AggregateID"},
			{"NoEventType", outbox.NewMessage{AggregateType: "o", AggregateID: "1", Payload: 1}, "EventType"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				tx, err := b.pool.Begin(t.Context())
				require.NoError(t, err)
				defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
				// The valid message first: a bad one anywhere inserts nothing.
				ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, valid, tc.msg)
				require.ErrorContains(t, err, tc.want)
				require.ErrorContains(t, err, "message 1")
				require.Nil(t, ids)
				require.NoError(t, tx.Commit(t.Context()))
				require.Empty(t, b.stored(t))
			})
		}
	})

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		schema := testdb.NewSchema(t)
		p := outbox.Producer{Table: schema + ".missing"}

		tx, err := testdb.Pool(t).Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.Background()) //nolint:errcheck // the tx failed
		_, err = p.Enqueue(t.Context(), tx, threeKinds...)
		require.ErrorIs(t, err, outbox.ErrTableMissing, "pgx")

		sqlTx, err := openSQL(t).BeginTx(t.Context(), nil)
		require.NoError(t, err)
		defer sqlTx.Rollback() //nolint:errcheck // the tx failed
		_, err = p.Enqueue(t.Context(), sqlTx, threeKinds...)
		require.ErrorIs(t, err, outbox.ErrTableMissing, "database/sql")
	})

	t.Run("UnsupportedTx", func(t *testing.T) {
		t.Parallel()
		_, err := outbox.Enqueue(t.Context(), "not a tx", threeKinds...)
		require.ErrorContains(t, err, "unsupported transaction type")
	})

	t.Run("PoolOrDBIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := outbox.Producer{Table: b.table}
		conn, err := b.pool.Acquire(t.Context())
		require.NoError(t, err)
		defer conn.Release()
		db := openSQL(t)
		sqlConn, err := db.Conn(t.Context())
		require.NoError(t, err)
		defer sqlConn.Close()

		for _, tc := range []struct {
			name string
			db   any
			typ  string
		}{
			{"PgxPool", b.pool, "*pgxpool.Pool"},
			{"PgxConn", conn.Conn(), "*pgx.Conn"},
			{"PgxPoolConn", conn, "*pgxpool.Conn"},
			{"SQLDB", db, "*sql.DB"},
			{"SQLConn", sqlConn, "*sql.Conn"},
		} {
			ids, err := p.Enqueue(t.Context(), tc.db, threeKinds...)
			require.ErrorIs(t, err, &outbox.NotInTransactionError{}, tc.name)
			var nt *outbox.NotInTransactionError
			require.ErrorAs(t, err, &nt, tc.name)
			require.Equal(t, tc.typ, nt.Type, tc.name)
			require.ErrorContains(t, err, "not a transaction", tc.name)
			require.Nil(t, ids, tc.name)
		}
		require.Empty(t, b.stored(t), "nothing was committed outside a transaction")
	})

	t.Run("NothingToEnqueue", func(t *testing.T) {
		t.Parallel()
		ids, err := outbox.Enqueue(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, ids)
	})

	t.Run("InvalidTableName", func(t *testing.T) {
		t.Parallel()
		_, err := outbox.Producer{Table: "a.b.c"}.Enqueue(t.Context(), nil, threeKinds...)
		require.Error(t, err)
	})
}

func openSQL(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", testdb.DSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}
