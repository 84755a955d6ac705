package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
)

// reference is the design article's per-row dispatcher, the reference
// `--variant seed` measures the dispatcher against: each worker claims in a
// transaction of its own (BEGIN, reap, claim, COMMIT), then commits every
// delivered message alone with a fenced mark_done. Its statements are this
// package's (sql/reference_*.sql), kept as the article wrote them.
type reference struct {
	reap, claim, done string
	cfg               *outbox.Config
}

func newReference(t *benchTable, cfg *outbox.Config) *reference {
	return &reference{
		reap:  t.sql("reference_reap.sql"),
		claim: t.sql("reference_claim.sql"),
		done:  t.sql("reference_done.sql"),
		cfg:   cfg.WithDefaults(), // the settings the dispatcher would run with
	}
}

// drain runs cfg.Workers workers until the table is drained and returns the
// round trips and commits they took.
func (r *reference) drain(ctx context.Context, pool *pgxpool.Pool, sink outbox.Sink) (int64, int64, error) {
	var roundTrips, commits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Workers)
	for w := range r.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("seed-%d", w)
			for ctx.Err() == nil {
				msgs, err := r.claimBatch(ctx, pool, owner)
				roundTrips.Add(4) // BEGIN, reap, claim, COMMIT
				commits.Add(1)
				if err != nil {
					errs <- err
					return
				}
				if len(msgs) == 0 {
					return
				}
				for i := range msgs {
					m := &msgs[i]
					if err := sink.Publish(ctx, m); err != nil {
						continue // the row's lease expires and it is claimed again
					}
					if _, err := pool.Exec(ctx, r.done, m.ID, m.FencingToken); err != nil {
						errs <- err
						return
					}
					roundTrips.Add(1)
					commits.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return roundTrips.Load(), commits.Load(), nil
}

// claimBatch runs the reference claim: BEGIN, reap, claim, COMMIT. The
// messages come back sorted by id.
func (r *reference) claimBatch(ctx context.Context, pool *pgxpool.Pool, owner string) ([]outbox.Message, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, r.reap, r.cfg.MaxAttempts); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, r.claim, owner, min(r.cfg.BatchSize, 50), r.cfg.Lease.Microseconds(), r.cfg.MaxAttempts)
	if err != nil {
		return nil, err
	}
	var out []outbox.Message
	for rows.Next() {
		var m outbox.Message
		var payload string
		var now any
		if err := rows.Scan(&m.ID, &m.AggregateType, &m.AggregateID, &m.EventType, &payload,
			&m.CreatedAt, &m.Attempt, &m.FencingToken, &now); err != nil {
			rows.Close()
			return nil, err
		}
		m.Payload = []byte(payload)
		out = append(out, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b outbox.Message) int { return cmp.Compare(a.ID, b.ID) })
	return out, tx.Commit(ctx)
}
