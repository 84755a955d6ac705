package store_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// TestFinalizeStoresAnyErrorText: error texts with NUL bytes or invalid
// UTF-8 (a sink quoting a broker reply or a response body) are stored
// cleaned, and the batch they ride in is written whole: before, PostgreSQL
// refused the batched statement (SQLSTATE 22021) and every healthy delivery
// of the batch was left to its lease, to be published again.
func TestFinalizeStoresAnyErrorText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 8)
	rows := b.claim(t, store.ClaimParams{Owner: "A", Batch: 8})
	require.Equal(t, ids, rowIDs(rows))
	outcomes := make([]store.RowWrite, len(rows))
	for i, r := range rows {
		outcomes[i] = store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone}
	}
	outcomes[3].Status, outcomes[3].Error = store.StatusDead, "422: body \x00{\"a\":1}\x00"
	outcomes[5].Status, outcomes[5].Error = store.StatusPending, "reply \xff\xfe\xc3("

	held := b.finalize(t, "A", outcomes...)

	require.Equal(t, []bool{true, true, true, true, true, true, true, true}, held)
	for i, id := range ids {
		r := b.row(t, id)
		switch i {
		case 3:
			require.Equal(t, store.StatusDead, r.Status)
			require.Equal(t, `422: body {"a":1}`, *r.LastError, "NUL bytes dropped, the rest kept")
		case 5:
			require.Equal(t, store.StatusPending, r.Status)
			require.Equal(t, "reply \uFFFD(", *r.LastError, "the invalid bytes replaced")
		default:
			require.Equal(t, store.StatusDone, r.Status, "row %d of the batch", i)
		}
	}
}

// TestFinalizeTextBoundsAfterCleaning: a text of 800 bytes that grows to
// 1,600 as each invalid byte becomes a 3-byte U+FFFD is still cut to 500.
func TestFinalizeTextBoundsAfterCleaning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueueN(t, 1)[0]
	rows := b.claim(t, store.ClaimParams{Owner: "A"})
	held := b.finalize(t, "A", store.RowWrite{ID: id, LeaseVersion: rows[0].LeaseVersion,
		Status: store.StatusDead, Error: strings.Repeat("\xffa", 400)})
	require.Equal(t, []bool{true}, held)
	got := *b.row(t, id).LastError
	require.LessOrEqual(t, len(got), 500)
	require.True(t, utf8.ValidString(got))
	require.True(t, strings.HasPrefix(got, "\uFFFDa\uFFFDa"))
}

// TestFinalizeOwnerWithAnyBytes: an owner name with a NUL byte claims,
// heartbeats and finalizes like any other; before, every claim failed.
func TestFinalizeOwnerWithAnyBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueueN(t, 1)[0]
	owner := "host\x00-\xff-1"
	rows := b.claim(t, store.ClaimParams{Owner: owner})
	require.Equal(t, []int64{id}, rowIDs(rows))
	leases := []store.Lease{{ID: id, Version: rows[0].LeaseVersion}}
	extended, err := b.st.Heartbeat(t.Context(), b.pool, owner, leases, 60e9)
	require.NoError(t, err)
	require.True(t, extended[leases[0]])
	require.Equal(t, []bool{true}, b.finalize(t, owner,
		store.RowWrite{ID: id, LeaseVersion: rows[0].LeaseVersion, Status: store.StatusDone}))
	require.NoError(t, b.st.Wait(t.Context(), b.pool, owner, 60e9))
	require.NoError(t, b.st.Unwait(t.Context(), b.pool, owner))
}

// TestFinalizeIsolatesRefusedRows: when the database refuses one outcome
// for its data (here constraints the table's owner added), the rest of the
// batch is written; the refused row is written with a fallback error text
// when the text was the cause, and otherwise left processing to its lease.
func TestFinalizeIsolatesRefusedRows(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		name := "Pool"
		if inTx {
			name = "InTransaction"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.exec(t, `ALTER TABLE {{table}} ADD CONSTRAINT no_forbidden
				CHECK (last_error IS NULL OR last_error NOT LIKE '%forbidden%')`)
			b.exec(t, `ALTER TABLE {{table}} ADD CONSTRAINT poison_never_dead
				CHECK (NOT (status = 'dead' AND aggregate_id = 'poison'))`)
			ids := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"}, msg{"c", "E"}, msg{"d", "E"}, msg{"poison", "E"},
				msg{"f", "E"}, msg{"g", "E"}, msg{"h", "E"}, msg{"i", "E"})
			rows := b.claim(t, store.ClaimParams{Owner: "A", Batch: len(ids)})
			require.Equal(t, ids, rowIDs(rows))
			outcomes := make([]store.RowWrite, len(rows))
			for i, r := range rows {
				outcomes[i] = store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone}
			}
			outcomes[1].Status, outcomes[1].Error = store.StatusDead, "forbidden word"
			outcomes[4].Status, outcomes[4].Error = store.StatusDead, "rejected"
			outcomes[7].Status, outcomes[7].Error = store.StatusPending, "forbidden again"

			held := finalizeMaybeInTx(t, b, inTx, outcomes)

			require.Equal(t, []bool{true, true, true, true, false, true, true, true, true}, held)
			for i, id := range ids {
				r := b.row(t, id)
				switch i {
				case 1, 7:
					require.Equal(t, outcomes[i].Status, r.Status)
					require.Equal(t, "(the outcome's error text was refused by the database: SQLSTATE 23514)", *r.LastError)
				case 4:
					require.Equal(t, store.StatusProcessing, r.Status, "refused whatever its text: left to its lease")
					require.Equal(t, "A", *r.LeaseOwner)
				default:
					require.Equal(t, store.StatusDone, r.Status, "row %d of the batch", i)
				}
			}
		})
	}
}

func finalizeMaybeInTx(t *testing.T, b *testBundle, inTx bool, outcomes []store.RowWrite) []bool {
	t.Helper()
	if !inTx {
		return b.finalize(t, "A", outcomes...)
	}
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	held, err := b.st.Finalize(t.Context(), tx, "A", outcomes)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	return held
}

// A row gone from the table (lost in a failover, a restore) and its id
// handed out again: the new row's first lease has the same token and may
// have the same owner. A finalize still retried for the old row must not
// land on the new one, which would then be done without ever being
// delivered; its confirmation after a lost reply must not count it either.
func TestFinalizeFencesOnTheRowNotItsID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 1)
	old := b.claim(t, store.ClaimParams{Owner: "A"})
	require.Len(t, old, 1)

	b.exec(t, "DELETE FROM {{table}} WHERE id = $1", ids[0])
	b.exec(t, "INSERT INTO {{table}} (id, aggregate_type, aggregate_id, event_type, payload, created_at) "+
		"OVERRIDING SYSTEM VALUE VALUES ($1, 'order', 'other', 'Reborn', '{}', $2)", ids[0], old[0].CreatedAt.Add(time.Second))
	reborn := b.claim(t, store.ClaimParams{Owner: "A"})
	require.Len(t, reborn, 1)
	require.Equal(t, old[0].ID, reborn[0].ID)
	require.Equal(t, old[0].LeaseVersion, reborn[0].LeaseVersion, "the new row's first token is the old one's")

	stale := store.RowWrite{ID: old[0].ID, LeaseVersion: old[0].LeaseVersion, Born: old[0].CreatedAt, Status: store.StatusDone}
	require.Equal(t, []bool{false}, b.finalize(t, "A", stale), "the old row's write landed on the new row")
	written, err := b.st.FinalizeWritten(t.Context(), b.pool, []store.RowWrite{stale})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, written)

	fresh := store.RowWrite{ID: reborn[0].ID, LeaseVersion: reborn[0].LeaseVersion, Born: reborn[0].CreatedAt, Status: store.StatusDone}
	require.Equal(t, []bool{true}, b.finalize(t, "A", fresh))
	written, err = b.st.FinalizeWritten(t.Context(), b.pool, []store.RowWrite{fresh})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, written)
}
