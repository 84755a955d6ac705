package lease

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// cursorReader is one dispatcher's view of a one-shard table under
// snapshot cursors: the window logic of cursorLeases, driven by hand.
type cursorReader struct {
	st    *store.Store
	pool  *pgxpool.Pool
	owner string
	lease store.ShardLease
	w     *window
	cache int
}

// read loads the window if it needs it and takes up to n ids of it; an
// empty window left open is closed at once.
func (r *cursorReader) read(ctx context.Context, n int) (*batch, []int64, error) {
	// A second load opens the next window when the first closed one that
	// had nothing left, as a claim does.
	for range 2 {
		l, ok := r.w.plan(r.lease)
		if !ok {
			break
		}
		got, err := r.st.LoadWindows(ctx, r.pool, r.owner, []store.WindowLoad{l}, r.cache)
		if err != nil || len(got) != 1 {
			return nil, nil, fmt.Errorf("load: %d windows, %w", len(got), err)
		}
		if r.w.load(r.lease, got[0], r.cache) == nil {
			break
		}
		if err := r.advance(ctx, r.w.ready()); err != nil {
			return nil, nil, err
		}
	}
	if len(r.w.ids) == 0 {
		return nil, nil, nil
	}
	b, ids := r.w.take(r.lease, n)
	return b, ids, nil
}

// advance writes complete batches' cursor move.
func (r *cursorReader) advance(ctx context.Context, batches []*batch) error {
	if len(batches) == 0 {
		return nil
	}
	advances, parks := writesOf(batches)
	held, err := r.st.AdvanceCursors(ctx, r.pool, r.owner, advances, parks)
	if err == nil && !held[r.lease.Shard] {
		err = fmt.Errorf("advance of shard %d under token %d fenced off", r.lease.Shard, r.lease.Token)
	}
	return err
}

// TestCursorModel runs producer transactions that begin, insert, commit
// and roll back in random interleavings (a transaction open across many
// windows included) against a reader that takes random batch sizes through
// a tiny id cache, so windows split at every size, and dies at random
// with batches read and not advanced (a new owner takes the shard over).
// Every committed row must be delivered, a rolled-back one never, and a
// row more than once only when it was in a batch a dead reader had not
// advanced.
func TestCursorModel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	st, err := store.New(schema + ".outbox")
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx, pool))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableShards(ctx, tx, 1) }))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableCursor(ctx, tx) }))
	shards := pgx.Identifier{schema, "outbox_shards"}.Sanitize()

	rapid.Check(t, func(rt *rapid.T) {
		must := func(err error) {
			if err != nil {
				rt.Fatal(err)
			}
		}
		_, err := pool.Exec(ctx, "TRUNCATE "+st.QuotedTable()+"; UPDATE "+shards+" SET owner = NULL, done = '3:3:', win = NULL, win_last = NULL")
		must(err)
		owners := 0
		take := func() *cursorReader {
			owners++
			_, err := pool.Exec(ctx, "UPDATE "+shards+" SET lease_until = now() - interval '1 second'")
			must(err)
			got, err := st.AcquireShards(ctx, pool, fmt.Sprintf("r%d", owners), time.Minute, 1, 10)
			must(err)
			if len(got) != 1 {
				rt.Fatalf("took %d shards", len(got))
			}
			return &cursorReader{st: st, pool: pool, owner: fmt.Sprintf("r%d", owners), lease: got[0].ShardLease,
				w: &window{token: got[0].Token}, cache: rapid.IntRange(1, 4).Draw(rt, "cache")}
		}
		r := take()

		type producer struct {
			tx  pgx.Tx
			ids []int64
		}
		var open []*producer
		committed, rolledBack := map[int64]bool{}, map[int64]bool{}
		delivered := map[int64]int{}
		mayRepeat := map[int64]bool{} // in a batch a dead reader had not advanced
		var inFlight []*batch
		var inFlightIDs [][]int64
		insert := func(db interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		}) int64 {
			var id int64
			must(db.QueryRow(ctx, st.InsertSQL(1), "order", "a", "E", `{}`, nil).Scan(&id))
			return id
		}
		defer func() {
			for _, p := range open {
				_ = p.tx.Rollback(ctx)
			}
		}()

		steps := rapid.IntRange(5, 60).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 6).Draw(rt, "action") {
			case 0: // a producer begins, and takes its xid at once or later
				if len(open) < 4 {
					tx, err := pool.Begin(ctx)
					must(err)
					p := &producer{tx: tx}
					if rapid.Bool().Draw(rt, "xid first") {
						_, err := tx.Exec(ctx, "SELECT pg_current_xact_id()")
						must(err)
					}
					open = append(open, p)
				}
			case 1: // an open producer inserts
				if len(open) > 0 {
					p := open[rapid.IntRange(0, len(open)-1).Draw(rt, "producer")]
					p.ids = append(p.ids, insert(p.tx))
				}
			case 2: // a producer ends
				if len(open) > 0 {
					i := rapid.IntRange(0, len(open)-1).Draw(rt, "producer")
					p := open[i]
					open = slices.Delete(open, i, i+1)
					if rapid.IntRange(0, 3).Draw(rt, "rollback") == 0 {
						must(p.tx.Rollback(ctx))
						for _, id := range p.ids {
							rolledBack[id] = true
						}
					} else {
						must(p.tx.Commit(ctx))
						for _, id := range p.ids {
							committed[id] = true
						}
					}
				}
			case 3: // a committed insert of its own
				committed[insert(pool)] = true
			case 4, 5: // the reader reads a batch, and advances what is complete
				b, ids, err := r.read(ctx, rapid.IntRange(1, 5).Draw(rt, "batch"))
				must(err)
				if b != nil {
					for _, id := range ids {
						delivered[id]++
						b.gone(id) // delivered: nothing to write
					}
					inFlight, inFlightIDs = append(inFlight, b), append(inFlightIDs, ids)
				}
				if rapid.Bool().Draw(rt, "advance") {
					must(r.advance(ctx, r.w.ready()))
					inFlight, inFlightIDs = nil, nil
				}
			case 6: // the reader dies; another takes the shard over
				for _, ids := range inFlightIDs {
					for _, id := range ids {
						mayRepeat[id] = true
					}
				}
				inFlight, inFlightIDs = nil, nil
				r = take()
			}
		}
		for _, p := range open {
			must(p.tx.Commit(ctx))
			for _, id := range p.ids {
				committed[id] = true
			}
		}
		open = nil
		_ = inFlight
		for range 1000 {
			b, ids, err := r.read(ctx, 3)
			must(err)
			if b == nil {
				must(r.advance(ctx, r.w.ready()))
				break
			}
			for _, id := range ids {
				delivered[id]++
				b.gone(id)
			}
			must(r.advance(ctx, r.w.ready()))
		}
		left, err := st.CursorUndelivered(ctx, pool, false)
		must(err)
		if left {
			rt.Fatal("rows left undelivered after the drain")
		}
		for id := range committed {
			if delivered[id] == 0 {
				rt.Fatalf("committed row %d never delivered", id)
			}
			if delivered[id] > 1 && !mayRepeat[id] {
				rt.Fatalf("row %d delivered %d times, not in a batch a dead reader left", id, delivered[id])
			}
		}
		for id := range delivered {
			if rolledBack[id] {
				rt.Fatalf("rolled-back row %d delivered", id)
			}
			if !committed[id] {
				rt.Fatalf("row %d delivered, never committed", id)
			}
		}
	})
}
