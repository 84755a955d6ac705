//go:build chaos

package chaos

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
)

// prodRec is what a producer knows about a message it wrote.
type prodRec struct {
	Producer  int
	N         int64
	Agg       string
	EventType string
	Sum       string
	Committed time.Time // when COMMIT returned
}

// ledger is the producers' log: ids whose COMMIT returned, ids of
// transactions rolled back on purpose, and ids whose COMMIT failed, so
// nobody knows whether they committed (the checker asks the table).
type ledger struct {
	mu         sync.Mutex
	committed  map[int64]prodRec
	rolledBack map[int64]prodRec
	uncertain  map[int64]prodRec
	txErrors   int
	// rejected counts transactions the database refused for a reason that
	// is not a connection fault or a timeout (rejections holds a few).
	rejected   int
	rejections []string
	// txs is when each transaction began and ended, committed or not.
	txs []txSpan
}

type txSpan struct{ start, end time.Time }

func newLedger() *ledger {
	return &ledger{committed: map[int64]prodRec{}, rolledBack: map[int64]prodRec{}, uncertain: map[int64]prodRec{}}
}

// lookup finds what was written under id, in any of the three logs.
func (l *ledger) lookup(id int64) (prodRec, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range []map[int64]prodRec{l.committed, l.rolledBack, l.uncertain} {
		if r, ok := m[id]; ok {
			return r, true
		}
	}
	return prodRec{}, false
}

func (l *ledger) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed)
}

// producer writes messages in transactions of its own, directly to
// PostgreSQL (producers are not under test; their link is not faulted).
type producer struct {
	idx       int
	pool      *pgxpool.Pool
	table     string
	ordered   bool
	aggs      []string
	rollbackP float64
	rng       *rand.Rand
	led       *ledger
	n         int64
	label     string // how it connects, for the report ("search_path=public")
	// hold keeps each transaction open this long after its inserts,
	// before it commits (the held_producer fault).
	hold time.Duration
}

// heldProducer is the producer index of the held_producer fault's
// transactions (the payload names its producer).
const heldProducer = 900

// refusedByDatabase tells a statement PostgreSQL refused (a missing
// relation, a failing trigger) from the faults producers are expected to
// meet: lost connections, a server shutting down or restarting, a
// statement cancelled by its timeout.
func refusedByDatabase(err error) bool {
	if errors.Is(err, outbox.ErrTableMissing) {
		// 42P01, translated: a relation the statement (or a trigger it
		// fired) names does not exist.
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch {
	case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "57014":
		return false
	}
	return true
}

// txOnce writes 1-3 messages in one transaction, rolling it back on
// purpose with probability rollbackP.
func (p *producer) txOnce(ctx context.Context) error {
	k := 1 + p.rng.IntN(3)
	agg := p.aggs[p.rng.IntN(len(p.aggs))]
	return p.write(ctx, agg, k, true)
}

// write commits k messages in one transaction, the first (in ordered mode
// every one) on agg; with mayRollback it rolls back with probability
// rollbackP instead.
func (p *producer) write(ctx context.Context, agg string, k int, mayRollback bool) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if p.ordered {
		// Serialises writers of one aggregate until commit, so id order is
		// commit order within it, as ordered mode requires (article §5).
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", p.table+"/"+agg); err != nil {
			return err
		}
	}
	msgs := make([]outbox.NewMessage, k)
	recs := make([]prodRec, k)
	for i := range msgs {
		if !p.ordered && i > 0 {
			agg = p.aggs[p.rng.IntN(len(p.aggs))]
		}
		p.n++
		var b [24]byte
		for j := range b {
			b[j] = byte(p.rng.Uint32())
		}
		blob := hex.EncodeToString(b[:1+p.rng.IntN(len(b))])
		ev := fmt.Sprintf("Event%d", p.rng.IntN(4))
		doc := payloadDoc{Producer: p.idx, N: p.n, Agg: agg, Blob: blob, Sum: payloadSum(p.idx, p.n, agg, blob)}
		msgs[i] = outbox.NewMessage{AggregateType: "chaos", AggregateID: agg, EventType: ev, Payload: doc}
		recs[i] = prodRec{Producer: p.idx, N: p.n, Agg: agg, EventType: ev, Sum: doc.Sum}
	}
	ids, err := outbox.Producer{Table: p.table}.Enqueue(ctx, tx, msgs...)
	if err != nil {
		return err
	}
	if p.hold > 0 {
		sleepCtx(ctx, p.hold)
	}
	if mayRollback && p.rng.Float64() < p.rollbackP {
		err := tx.Rollback(ctx)
		p.led.mu.Lock()
		for i, id := range ids {
			p.led.rolledBack[id] = recs[i]
		}
		p.led.mu.Unlock()
		return err
	}
	err = tx.Commit(ctx)
	now := time.Now()
	p.led.mu.Lock()
	defer p.led.mu.Unlock()
	for i, id := range ids {
		recs[i].Committed = now
		if err != nil {
			p.led.uncertain[id] = recs[i]
		} else {
			p.led.committed[id] = recs[i]
		}
	}
	return err
}

// run writes transactions every interval until ctx ends (or until count
// committed messages when count > 0), retrying through database faults.
func (p *producer) run(ctx context.Context, interval time.Duration, count int) {
	for ctx.Err() == nil {
		if count > 0 && p.led.size() >= count {
			return
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		began := time.Now()
		err := p.txOnce(tctx)
		cancel()
		p.led.mu.Lock()
		p.led.txs = append(p.led.txs, txSpan{began, time.Now()})
		p.led.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			p.led.mu.Lock()
			p.led.txErrors++
			if refusedByDatabase(err) {
				p.led.rejected++
				if len(p.led.rejections) < 8 {
					p.led.rejections = append(p.led.rejections, fmt.Sprintf("producer %d (%s): %v", p.idx, p.label, err))
				}
			}
			p.led.mu.Unlock()
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if interval > 0 {
			sleepCtx(ctx, time.Duration(float64(interval)*(0.5+p.rng.Float64())))
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
