package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/outboxd/outbox/internal/store"
)

// mrow is the model of one outbox row.
type mrow struct {
	id       int64
	agg      string
	status   string
	attempts int
	version  int64
	owner    string
	expired  bool // processing with lease_until in the past
	future   bool // pending with available_at in the future
	expireAt int  // order in which leases expired (earlier expiry first)
}

const modelMaxAttempts = 3

// TestStateMachine drives claim, finalize (every outcome, with current and
// stale fences), lease expiry and reaping at random against a model of the
// rules, and compares the whole table with the model after every step.
func TestStateMachine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	q := b.st.QuotedTable()
	rapid.Check(t, func(rt *rapid.T) {
		_, err := b.pool.Exec(ctx, "TRUNCATE "+q+" RESTART IDENTITY")
		if err != nil {
			rt.Fatal(err)
		}
		var rows []*mrow
		expiries := 0
		byID := func(id int64) *mrow {
			for _, r := range rows {
				if r.id == id {
					return r
				}
			}
			rt.Fatalf("no row %d in the model", id)
			return nil
		}
		check := func(step string) {
			got, err := b.pool.Query(ctx, "SELECT id, status, attempts, lease_version, coalesce(lease_owner, '') FROM "+q+" ORDER BY id")
			if err != nil {
				rt.Fatal(err)
			}
			type dbrow struct {
				id       int64
				status   string
				attempts int
				version  int64
				owner    string
			}
			db, err := pgx.CollectRows(got, func(r pgx.CollectableRow) (dbrow, error) {
				var d dbrow
				return d, r.Scan(&d.id, &d.status, &d.attempts, &d.version, &d.owner)
			})
			if err != nil {
				rt.Fatal(err)
			}
			if len(db) != len(rows) {
				rt.Fatalf("%s: %d rows in the table, %d in the model", step, len(db), len(rows))
			}
			for i, d := range db {
				m := rows[i]
				want := dbrow{m.id, m.status, m.attempts, m.version, m.owner}
				if d != want {
					rt.Fatalf("%s: row %d is %+v, model says %+v", step, d.id, d, want)
				}
			}
		}
		blocked := func(r *mrow) bool {
			for _, p := range rows {
				if p.agg == r.agg && p.id < r.id && p.status != store.StatusDone {
					return true
				}
			}
			return false
		}

		rt.Repeat(map[string]func(*rapid.T){
			"insert": func(rt *rapid.T) {
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				for range n {
					agg := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "agg")
					var id int64
					if err := b.pool.QueryRow(ctx, b.st.InsertSQL(1), "order", agg, "E", "{}", nil).Scan(&id); err != nil {
						rt.Fatal(err)
					}
					rows = append(rows, &mrow{id: id, agg: agg, status: store.StatusPending})
				}
				check("insert")
			},
			"claim": func(rt *rapid.T) {
				owner := rapid.SampledFrom([]string{"w1", "w2"}).Draw(rt, "owner")
				batch := rapid.IntRange(1, 4).Draw(rt, "batch")
				ordered := rapid.Bool().Draw(rt, "ordered")
				// What the statement sees, before its own writes.
				var expired, ready []*mrow
				for _, r := range rows {
					switch {
					case ordered && blocked(r):
					case r.status == store.StatusProcessing && r.expired && r.attempts < modelMaxAttempts:
						expired = append(expired, r)
					case r.status == store.StatusPending && !r.future:
						ready = append(ready, r)
					}
				}
				slices.SortFunc(expired, func(a, b *mrow) int { return a.expireAt - b.expireAt })
				got, _, err := b.st.Claim(ctx, b.pool, store.ClaimParams{
					Owner: owner, Batch: batch, Lease: time.Hour, MaxAttempts: modelMaxAttempts, Ordered: ordered,
				}, nil)
				if err != nil {
					rt.Fatal(err)
				}
				for _, r := range rows { // reaped in the same statement
					if r.status == store.StatusProcessing && r.expired && r.attempts >= modelMaxAttempts {
						r.status, r.owner, r.expired = store.StatusDead, "", false
					}
				}
				want := expired[:min(batch, len(expired))]
				ids := make([]int64, len(got))
				for i, g := range got {
					ids[i] = g.ID
				}
				if len(got) != min(batch, len(expired)+len(ready)) {
					rt.Fatalf("claimed %v, want %d rows (expired %d, ready %d, batch %d)", ids, min(batch, len(expired)+len(ready)), len(expired), len(ready), batch)
				}
				// Unordered claims take expired leases first; ordered claims
				// take heads in aggregate order, whatever their state.
				for _, w := range want {
					if !ordered && !slices.Contains(ids, w.id) {
						rt.Fatalf("claimed %v without expired lease %d, which comes first", ids, w.id)
					}
				}
				for _, g := range got {
					r := byID(g.ID)
					if !slices.Contains(expired, r) && !slices.Contains(ready, r) {
						rt.Fatalf("claimed row %d, which was not claimable (%+v)", g.ID, *r)
					}
					r.status, r.owner, r.expired, r.future = store.StatusProcessing, owner, false, false
					r.attempts++
					r.version++
					if g.LeaseVersion != r.version || g.Attempts != r.attempts {
						rt.Fatalf("claim returned version %d attempts %d for row %d, model %d/%d", g.LeaseVersion, g.Attempts, g.ID, r.version, r.attempts)
					}
				}
				check("claim")
			},
			"finalize": func(rt *rapid.T) {
				var claimed []*mrow
				for _, r := range rows {
					if r.version > 0 {
						claimed = append(claimed, r)
					}
				}
				if len(claimed) == 0 {
					rt.Skip("nothing claimed yet")
				}
				r := rapid.SampledFrom(claimed).Draw(rt, "row")
				version := r.version - int64(rapid.IntRange(0, 1).Draw(rt, "stale"))
				owner := r.owner
				if owner == "" || rapid.IntRange(0, 5).Draw(rt, "other owner") == 0 {
					owner = rapid.SampledFrom([]string{"w1", "w2"}).Draw(rt, "owner")
				}
				kind := rapid.SampledFrom([]string{"done", "retry-now", "retry-later", "defer", "dead", "release"}).Draw(rt, "outcome")
				o := store.RowWrite{ID: r.id, LeaseVersion: version, Error: "e"}
				future, refund := false, false
				switch kind {
				case "done":
					o.Status = store.StatusDone
				case "retry-now":
					o.Status = store.StatusPending
				case "retry-later":
					o.Status, o.Delay, future = store.StatusPending, time.Hour, true
				case "defer":
					o.Status, o.Delay, o.Refund, future, refund = store.StatusPending, time.Hour, true, true, true
				case "dead":
					o.Status = store.StatusDead
				case "release":
					o.Status, o.Refund, refund = store.StatusPending, true, true
				}
				held, err := b.st.Finalize(ctx, b.pool, owner, []store.RowWrite{o})
				if err != nil {
					rt.Fatal(err)
				}
				wantHeld := r.status == store.StatusProcessing && r.version == version && r.owner == owner
				if held[0] != wantHeld {
					rt.Fatalf("finalize %s of row %d (%+v) with version %d owner %s: fence held=%v, model says %v", kind, r.id, *r, version, owner, held[0], wantHeld)
				}
				if wantHeld {
					r.status, r.owner, r.expired, r.future = o.Status, "", false, future
					if refund {
						r.attempts--
					}
				}
				check(fmt.Sprintf("finalize %s", kind))
			},
			"expire": func(rt *rapid.T) {
				var live []*mrow
				for _, r := range rows {
					if r.status == store.StatusProcessing && !r.expired {
						live = append(live, r)
					}
				}
				if len(live) == 0 {
					rt.Skip("no live lease")
				}
				r := rapid.SampledFrom(live).Draw(rt, "row")
				expiries++
				// Later expiries get later (but past) times, so the claim's
				// lease_until order matches expireAt.
				if _, err := b.pool.Exec(ctx, "UPDATE "+q+" SET lease_until = now() - interval '1 hour' + $2 * interval '1 millisecond' WHERE id = $1", r.id, expiries); err != nil {
					rt.Fatal(err)
				}
				r.expired, r.expireAt = true, expiries
				check("expire")
			},
			"mature": func(rt *rapid.T) {
				var waiting []*mrow
				for _, r := range rows {
					if r.status == store.StatusPending && r.future {
						waiting = append(waiting, r)
					}
				}
				if len(waiting) == 0 {
					rt.Skip("nothing scheduled")
				}
				r := rapid.SampledFrom(waiting).Draw(rt, "row")
				if _, err := b.pool.Exec(ctx, "UPDATE "+q+" SET available_at = now() - interval '1 second' WHERE id = $1", r.id); err != nil {
					rt.Fatal(err)
				}
				r.future = false
				check("mature")
			},
		})
	})
}
