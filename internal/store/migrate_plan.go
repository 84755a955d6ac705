package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// migrationPlan is the steps a table still needs, grouped as they run.
type migrationPlan struct {
	store       *Store // the table named with its schema
	live        bool   // the table existed before this run
	lockTimeout time.Duration
	groups      []stepGroup
}

// stepGroup is consecutive steps run in one transaction, or one index
// build on a live table, run outside any, statement by statement.
type stepGroup struct {
	steps      []migrationStep
	concurrent bool
}

// plan checks each step against the catalog and groups the missing ones.
// The checks read only the catalog: no lock is taken on the table.
func (s *Store) plan(ctx context.Context, conn MigrateDB, lockTimeout time.Duration) (*migrationPlan, error) {
	p := &migrationPlan{store: s, lockTimeout: lockTimeout}
	var schema, name string
	var current bool
	err := conn.QueryRow(ctx, s.resolve, s.Table.ident("")).Scan(&schema, &name, &current)
	switch {
	case err == nil:
		p.live = true
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, translate(err)
	}
	for _, st := range migrationSteps() {
		var done bool
		if err := conn.QueryRow(ctx, st.check, st.checkArgs(s.Table)...).Scan(&done); err != nil {
			return nil, stepError(st, err)
		}
		if done {
			continue
		}
		concurrent := p.live && st.concurrent()
		last := len(p.groups) - 1
		if concurrent || last < 0 || p.groups[last].concurrent {
			p.groups = append(p.groups, stepGroup{concurrent: concurrent})
			last++
		}
		p.groups[last].steps = append(p.groups[last].steps, st)
	}
	return p, nil
}

// render is a step's DDL (or one of its statements) for this table.
func (p *migrationPlan) render(raw string) string {
	keyword := ""
	if p.live {
		keyword = "CONCURRENTLY"
	}
	// Markers that are not names go first: a name may contain them.
	raw = strings.ReplaceAll(raw, "{{concurrently}}", keyword)
	raw = strings.ReplaceAll(raw, "$$", dollarTag(p.store.Table.String()))
	return p.store.Table.replacer().Replace(raw)
}

// result is the plan as MigrateWith reports it; a nil plan reports nothing.
func (p *migrationPlan) result() MigrateResult {
	var r MigrateResult
	if p == nil {
		return r
	}
	var b strings.Builder
	for _, g := range p.groups {
		if !g.concurrent {
			fmt.Fprintf(&b, "BEGIN;\nSET LOCAL lock_timeout = '%s';\n", formatLockTimeout(p.lockTimeout))
		}
		for _, st := range g.steps {
			r.Steps = append(r.Steps, st.Migration+": "+st.Name)
			fmt.Fprintf(&b, "-- %s: %s\n%s\n", st.Migration, st.Name, p.render(st.apply))
		}
		if !g.concurrent {
			b.WriteString("COMMIT;\n")
		}
	}
	r.SQL = b.String()
	return r
}

// runWithRetry runs a group, and again after each lock timeout, saying what
// it waits for, until it succeeds or ctx ends.
func (p *migrationPlan) runWithRetry(ctx context.Context, conn MigrateDB, g stepGroup, log *slog.Logger) error {
	for try := 1; ; try++ {
		err := p.run(ctx, conn, g, log)
		if err == nil || !isLockTimeout(err) {
			return err
		}
		log.Warn("migrate: waiting for a lock on the table; producers are not blocked meanwhile, retrying",
			slog.String("step", g.steps[0].Migration+": "+g.steps[0].Name), slog.Int("try", try),
			slog.Duration("lock_timeout", p.lockTimeout), slog.Any("held_by", p.holders(ctx, conn)))
		t := time.NewTimer(min(time.Duration(try)*250*time.Millisecond, 5*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("migration %s, step %q: gave up waiting for a lock: %w", g.steps[0].Migration, g.steps[0].Name, ctx.Err())
		case <-t.C:
		}
	}
}

func (p *migrationPlan) run(ctx context.Context, conn MigrateDB, g stepGroup, log *slog.Logger) error {
	if g.concurrent {
		st := g.steps[0]
		log.Info("migrate: building an index concurrently; it waits for open transactions on the table, producers keep writing",
			slog.String("step", st.Migration+": "+st.Name))
		for _, stmt := range st.statements() {
			if _, err := conn.Exec(ctx, p.render(stmt), pgx.QueryExecModeSimpleProtocol); err != nil {
				return stepError(st, err)
			}
		}
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, rawSQL("sql/migrate_lock_timeout.sql"), formatLockTimeout(p.lockTimeout)); err != nil {
		return translate(err)
	}
	for _, st := range g.steps {
		log.Info("migrate: applying", slog.String("step", st.Migration+": "+st.Name))
		// Simple protocol: a step may hold several statements.
		if _, err := tx.Exec(ctx, p.render(st.apply), pgx.QueryExecModeSimpleProtocol); err != nil {
			return stepError(st, err)
		}
	}
	return translate(tx.Commit(ctx))
}

// holders describes the sessions holding a lock on the table, for the log
// line of a wait; nil if they cannot be read.
func (p *migrationPlan) holders(ctx context.Context, conn MigrateDB) []string {
	rows, err := conn.Query(ctx, rawSQL("sql/migrate_blockers.sql"), p.store.Table.ident(""))
	if err != nil {
		return nil
	}
	var out []string
	var pid int32
	var mode, app, state string
	var age float64
	_, _ = pgx.ForEachRow(rows, []any{&pid, &mode, &app, &state, &age}, func() error {
		out = append(out, fmt.Sprintf("pid %d (%s, %s, application %q, transaction open %.0fs)", pid, mode, state, app, age))
		return nil
	})
	return out
}
