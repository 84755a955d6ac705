package outbox_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/inbox"
)

// uids reads each row's uid column, "" where it is NULL.
func (b *testBundle) uids(t *testing.T) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT id, coalesce(uid::text, '') FROM `+b.quoted)
	require.NoError(t, err)
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var uid string
		require.NoError(t, rows.Scan(&id, &uid))
		out[id] = uid
	}
	require.NoError(t, rows.Err())
	return out
}

// Every sink sends Message.IDString, the message's identity: the row's uid,
// qualified as "orders:UID" with Config.IDNamespace; never the row id.
func TestIdentityIsTheRowsUID(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, mode leaseMode) {
		for _, ns := range []string{"orders", ""} {
			b := mode.bundle(t)
			b.enqueueN(t, 3, "agg")
			rec := newRecorder(func(context.Context, *outbox.Message) error { return nil })
			drain(t, b.dispatcher(t, rec.Sink(), mode.config(outbox.Config{IDNamespace: ns})))

			got := map[int64]string{}
			for _, m := range rec.Messages() {
				got[m.ID] = m.IDString()
				require.Equal(t, m.IDString(), m.DedupeKey())
			}
			want := map[int64]string{}
			for id, uid := range b.uids(t) {
				require.Len(t, uid, 36, "every row gets a uid at insert")
				want[id] = uid
				if ns != "" {
					want[id] = ns + ":" + uid
				}
			}
			require.Equal(t, want, got, "namespace %q", ns)
		}
	})
}

// A row inserted before migration 006 has no uid: it keeps the identity it
// had, its id, so a redelivery after the upgrade is still recognised.
func TestRowWithoutUIDKeepsItsIDAsIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 2, "agg")
	b.exec(t, `UPDATE `+b.quoted+` SET uid = NULL WHERE id = $1`, ids[0])
	rec := newRecorder(func(context.Context, *outbox.Message) error { return nil })
	drain(t, b.dispatcher(t, rec.Sink(), &outbox.Config{IDNamespace: "orders"}))

	uids := b.uids(t)
	got := map[int64]string{}
	for _, m := range rec.Messages() {
		got[m.ID] = m.IDString()
	}
	require.Equal(t, map[int64]string{
		ids[0]: "orders:" + strconv.FormatInt(ids[0], 10),
		ids[1]: "orders:" + uids[ids[1]],
	}, got)
}

// After a failover to a standby that had not received the newest rows (or
// a point-in-time restore, or a sequence reset) the identity sequence
// gives the ids of messages already delivered to new ones. A receiver that
// applies each message once through the inbox, keyed on what the sink
// sends, must apply the new messages too.
func TestIdentityOutlivesAReusedID(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, mode leaseMode) { identityOutlivesAReusedID(t, mode) })
}

func identityOutlivesAReusedID(t *testing.T, mode leaseMode) {
	b := mode.bundle(t)
	ib, err := inbox.New(b.schema + ".inbox")
	require.NoError(t, err)
	require.NoError(t, ib.Migrate(t.Context(), b.pool))

	var mu sync.Mutex
	applied := map[string]int64{} // key -> row id
	receive := func(ctx context.Context, m *outbox.Message) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			ok, err := ib.Apply(ctx, tx, "billing", m.IDString(), func(context.Context, pgx.Tx) error { return nil })
			if ok {
				mu.Lock()
				applied[m.IDString()] = m.ID
				mu.Unlock()
			}
			return err
		})
	}

	first := b.enqueueN(t, 3, "agg")
	drain(t, b.dispatcher(t, outbox.SinkFunc(receive), mode.config(outbox.Config{})))
	require.Len(t, applied, 3)

	// The rows the "standby" never received are gone, and its sequence
	// hands out their ids again.
	b.exec(t, `DELETE FROM `+b.quoted)
	b.exec(t, `ALTER TABLE `+b.quoted+` ALTER COLUMN id RESTART WITH `+strconv.FormatInt(first[0], 10))
	second := b.enqueueN(t, 3, "agg")
	require.Equal(t, first, second, "the new messages reuse the delivered ones' ids")

	drain(t, b.dispatcher(t, outbox.SinkFunc(receive), mode.config(outbox.Config{})))
	require.Len(t, applied, 6, "every message is applied once; none is taken for one delivered before with its id")
}
