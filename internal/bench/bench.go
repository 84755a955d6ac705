// Package bench is `outboxd bench`: it measures the dispatcher through the
// public outbox API only (Admin, Producer.Enqueue, Dispatcher) on tables
// it creates in schemas of its own, and compares it with a reference
// implementation of the design article's per-row statements (reference.go),
// whose SQL is this package's own. The outbox table itself is created and
// changed only through [outbox.Admin]; no statement of the store is copied.
package bench

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
)

//go:embed sql/*.sql
var files embed.FS

// Config is what one bench run measures and with what.
type Config struct {
	// Messages are pre-inserted and drained by each variant.
	Messages int
	// DoneRows pre-fill each table (a claim must not slow down with them).
	DoneRows int
	// Aggregates is how many aggregates the pre-inserted messages are
	// spread over, in turn (0: 1,000). One is a single busy aggregate's
	// backlog, which goes out one message after another.
	Aggregates int
	// Variant is "lease" (the dispatcher), "seed" (the reference) or "both".
	Variant string
	// Producers, when positive and Latency is off, measures producers'
	// insert rates instead of draining, Rounds times per phase, each phase
	// lasting Duration.
	Producers, Rounds int
	Duration          time.Duration
	// Latency measures delivery latency at Rate inserts/s from Producers
	// producers for Duration, through an HTTP sink HTTPSink opens.
	Latency bool
	Rate    int
	// Tenants, when positive, measures that many tenant tables relayed by
	// one process (idle cost, then a burst of Messages over them all),
	// their pool set up by TenantPool as the daemon sets up its own.
	Tenants    int
	TenantPool func(*pgxpool.Config)
	// Keep leaves the bench schemas in place.
	Keep bool
	// Shards, when positive, sets each table up with that many shards
	// (for a dispatcher with LeaseShards).
	Shards int
	// Cursor sets each table up for snapshot cursors too (LeaseCursor),
	// the cursors moved past its done rows once they are inserted.
	Cursor bool
	// HoldSnapshot keeps another session in a REPEATABLE READ transaction
	// with its snapshot taken, HoldWriter one in a transaction that has
	// written (its id assigned), for the whole of each drain: vacuum
	// cannot remove what either could still see.
	HoldSnapshot, HoldWriter bool
	// Sink is where drained messages go.
	Sink outbox.Sink
	// HTTPSink opens the HTTP sink to a URL (Latency).
	HTTPSink func(url string) (outbox.Sink, error)
	// Dispatcher returns the dispatcher's configuration for a table.
	Dispatcher func(table string) (*outbox.Config, error)
	// Stdout gets the results, Stderr the progress.
	Stdout, Stderr io.Writer
}

// Benchmarker runs the bench against one database.
type Benchmarker struct {
	pool *pgxpool.Pool
	cfg  *Config
}

// New returns a Benchmarker for pool and cfg.
func New(pool *pgxpool.Pool, cfg *Config) *Benchmarker { return &Benchmarker{pool: pool, cfg: cfg} }

// Run runs what the configuration asks for and prints its results.
func (b *Benchmarker) Run(ctx context.Context) error {
	switch {
	case b.cfg.Tenants > 0:
		return b.tenants(ctx)
	case b.cfg.Latency:
		return b.latency(ctx)
	case b.cfg.Producers > 0:
		return b.producers(ctx)
	}
	variants := []string{b.cfg.Variant}
	if b.cfg.Variant == "both" {
		variants = []string{"seed", "lease"}
	}
	rates := map[string]float64{}
	for _, v := range variants {
		res, err := b.drain(ctx, v)
		if err != nil {
			return err
		}
		rates[v] = res
	}
	if len(rates) == 2 && rates["seed"] > 0 {
		fmt.Fprintf(b.cfg.Stdout, "lease / seed: %.1fx\n", rates["lease"]/rates["seed"])
	}
	return nil
}

// benchTable is a migrated outbox table in a schema of the bench's own.
type benchTable struct {
	name   string // "schema.outbox", as outbox.Config.Table takes it
	schema string
	admin  *outbox.Admin
}

// sql returns the embedded statement name with the table's quoted name in.
func (t *benchTable) sql(name string) string {
	b, err := files.ReadFile("sql/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return strings.NewReplacer(
		"{{table}}", pgx.Identifier{t.schema, "outbox"}.Sanitize(),
		"{{naive_function}}", pgx.Identifier{t.schema, "naive_notify"}.Sanitize(),
	).Replace(string(b))
}

// table creates a fresh schema with a migrated outbox table holding
// doneRows done rows and pending pending rows. drop removes it (unless
// Keep), also after an error.
func (b *Benchmarker) table(ctx context.Context, doneRows, pending int) (*benchTable, func(), error) {
	t := &benchTable{schema: fmt.Sprintf("outboxd_bench_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	t.name = t.schema + ".outbox"
	drop := func() {
		if b.cfg.Keep {
			fmt.Fprintf(b.cfg.Stdout, "kept table %s\n", t.name)
			return
		}
		_, _ = b.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{t.schema}.Sanitize()+" CASCADE")
	}
	a, err := outbox.NewAdmin(b.pool, t.name)
	if err != nil {
		return nil, drop, err
	}
	t.admin = a
	if err := a.Migrate(ctx); err != nil {
		return nil, drop, err
	}
	if b.cfg.Shards > 0 {
		if err := a.EnableShards(ctx, b.cfg.Shards); err != nil {
			return nil, drop, err
		}
	}
	if b.cfg.Cursor {
		if err := a.EnableCursors(ctx); err != nil {
			return nil, drop, err
		}
	}
	fill := t.sql("fill.sql")
	for _, part := range []struct {
		count  int
		status string
	}{{doneRows, "done"}, {pending, "pending"}} {
		if part.status == "pending" && b.cfg.Cursor {
			// Delivered: the cursors stand past the done rows.
			pass := "UPDATE " + pgx.Identifier{t.schema, "outbox_shards"}.Sanitize() +
				" SET done = pg_catalog.pg_current_snapshot(), win = NULL, win_last = NULL"
			if _, err := b.pool.Exec(ctx, pass); err != nil {
				return nil, drop, err
			}
		}
		for done := 0; done < part.count; {
			chunk := min(100000, part.count-done)
			if _, err := b.pool.Exec(ctx, fill, chunk, part.status, cmp.Or(b.cfg.Aggregates, 1000)); err != nil {
				return nil, drop, err
			}
			done += chunk
			if part.count >= 100000 {
				fmt.Fprintf(b.cfg.Stderr, "  inserted %d/%d %s rows\n", done, part.count, part.status)
			}
		}
	}
	if _, err := b.pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{t.schema, "outbox"}.Sanitize()); err != nil {
		return nil, drop, err
	}
	return t, drop, nil
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// nullSink accepts every message.
func nullSink() outbox.Sink {
	return outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
}
