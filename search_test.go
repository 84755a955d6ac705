package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// searchAll follows Search's continuation from the newest row until nothing
// is left, checking that no call reads more than window rows; it returns the
// ids found and how many calls came back partial.
func searchAll(t *testing.T, b *testBundle, f outbox.Filter, limit, window int) (ids []int64, partials int) {
	t.Helper()
	p := outbox.Page{Desc: true, Limit: limit}
	for calls := 0; ; calls++ {
		require.Less(t, calls, 1000, "the continuation does not end")
		sp, err := b.admin.Search(t.Context(), f, p, window)
		require.NoError(t, err)
		require.LessOrEqual(t, sp.Searched, int64(window), "one call read more than its window")
		ids = append(ids, summaryIDs(sp.Messages)...)
		if sp.Partial {
			partials++
			require.Equal(t, int64(window), sp.Searched, "a partial page read its whole window")
		}
		if sp.Next == 0 {
			return ids, partials
		}
		require.True(t, p.After == 0 || sp.Next < p.After, "the continuation moves on")
		p.After = sp.Next
	}
}

// TestAdminSearchWindow: a filter no index serves reads a bounded window
// per call, says where it stopped, and the continuation finds the rest.
func TestAdminSearchWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := b.fixture(t, 200) // dead rows (i%4 == 3) say "timeout"
	// Two rare matches, far apart: rows 20 and 170.
	for _, i := range []int{20, 170} {
		_, err := b.pool.Exec(ctx, `UPDATE `+b.quoted+` SET last_error = 'rare: disk full' WHERE id = $1`, ids[i])
		require.NoError(t, err)
	}
	rare := outbox.Filter{ErrorContains: "disk full"}

	// The newest 50 rows (150..199) hold row 170 only: the first page is
	// partial, has it, and goes on below row 150.
	sp, err := b.admin.Search(ctx, rare, outbox.Page{Desc: true, Limit: 10}, 50)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[170]}, summaryIDs(sp.Messages))
	require.True(t, sp.Partial)
	require.Equal(t, int64(50), sp.Searched)
	require.Equal(t, ids[150], sp.Next)

	found, partials := searchAll(t, b, rare, 10, 50)
	require.Equal(t, []int64{ids[170], ids[20]}, found)
	require.Equal(t, 4, partials, "200 rows in windows of 50")

	// A common match fills the page before the window ends: not partial.
	sp, err = b.admin.Search(ctx, outbox.Filter{ErrorContains: "timeout"}, outbox.Page{Desc: true, Limit: 5}, 50)
	require.NoError(t, err)
	require.Len(t, sp.Messages, 5)
	require.False(t, sp.Partial)
	require.Equal(t, sp.Messages[4].ID, sp.Next)
	require.Less(t, sp.Searched, int64(50))

	// Oldest first walks the same windows the other way.
	sp, err = b.admin.Search(ctx, rare, outbox.Page{Limit: 10}, 50)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[20]}, summaryIDs(sp.Messages))
	require.Equal(t, ids[49], sp.Next)
	require.True(t, sp.Partial)

	// Counts: among the newest 50, one match, at least; a window holding
	// the whole table counts exactly.
	c, err := b.admin.CountWindow(ctx, rare, 50)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 1, Capped: true, Partial: true, Searched: 50}, c)
	c, err = b.admin.CountWindow(ctx, rare, 500)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 2}, c)
	// The dead index drives a dead-only window: a tenth of the rows.
	c, err = b.admin.CountWindow(ctx, outbox.Filter{Status: []string{"dead"}, ErrorContains: "timeout"}, 20)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 2, Capped: true, Partial: true, Searched: 2}, c)
}

// TestAdminSearchIndexedColumn: an equality term on a column that leads an
// index on (column, id) drives the search, so it needs no window.
func TestAdminSearchIndexedColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := b.fixture(t, 120) // aggregate a-(i%3)
	f := outbox.Filter{AggregateID: "a-1"}
	var want []int64
	for i := len(ids) - 1; i >= 0; i-- {
		if i%3 == 1 {
			want = append(want, ids[i])
		}
	}

	_, partials := searchAll(t, b, f, 500, 30)
	require.Equal(t, 4, partials, "without an index: windows of 30 over 120 rows")

	_, err := b.pool.Exec(ctx, `CREATE INDEX ON `+b.quoted+` (aggregate_id, id)`)
	require.NoError(t, err)
	sp, err := b.admin.Search(ctx, f, outbox.Page{Desc: true, Limit: 500}, 30)
	require.NoError(t, err)
	require.Equal(t, want, summaryIDs(sp.Messages))
	require.False(t, sp.Partial)
	require.Zero(t, sp.Searched, "no window")
	require.Zero(t, sp.Next)
	c, err := b.admin.CountWindow(ctx, f, 30)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 40}, c)
	// The index serves the term; another term is still checked in a window,
	// a tenth of it through the index.
	sp, err = b.admin.Search(ctx, outbox.Filter{AggregateID: "a-1", PayloadPath: "$.n < 0"}, outbox.Page{Desc: true}, 30)
	require.NoError(t, err)
	require.True(t, sp.Partial)
	require.Equal(t, int64(3), sp.Searched)
	require.Equal(t, want[2], sp.Next)
}

// TestAdminCountExactWithin: an exact count that cannot finish in time is
// cancelled by the server and says so; one that can is exact.
func TestAdminCountExactWithin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `INSERT INTO `+b.quoted+` (aggregate_type, aggregate_id, event_type, payload, status, done_at)
		SELECT 'order', 'o-' || g, 'OrderPaid', jsonb_build_object('n', g), 'done', now() FROM generate_series(1, 300000) AS g`)
	require.NoError(t, err)
	slow := outbox.Filter{PayloadPath: "$.n > 0", ErrorContains: "x"}
	n, ok, err := b.admin.CountExactWithin(ctx, slow, 1e6) // 1 ms
	require.NoError(t, err)
	require.False(t, ok, "counting 300,000 rows within 1 ms")
	require.Zero(t, n)
	n, ok, err = b.admin.CountExactWithin(ctx, outbox.Filter{Status: []string{"dead"}}, 1e9)
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, n)
	// The connection is fine afterwards: the timeout was local to the count.
	c, err := b.admin.Count(ctx, outbox.Filter{IDMax: 10}, true)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 10}, c)
}
