package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// validateNonEmpty validates the check constraint refusing empty names
// (migration 008, added NOT VALID) once no existing row violates it, and
// otherwise logs how many do: new rows are refused from the start, and the
// existing ones stay, untouched, until an operator fixes or deletes them
// and migrates again. It returns how many rows violate it. Validation takes
// a lock that lets producers and dispatchers go on; a lock timeout leaves
// it for the next migrate.
func (s *Store) validateNonEmpty(ctx context.Context, conn MigrateDB, lockTimeout time.Duration, log *slog.Logger) (int64, error) {
	name := s.Table.Name + suffixNonEmpty
	var pending bool
	if err := conn.QueryRow(ctx, rawSQL("sql/nonempty_state.sql"), s.Table.ident(""), name).Scan(&pending); err != nil {
		return 0, translate(err)
	}
	if !pending {
		return 0, nil
	}
	var n int64
	var ids []int64
	if err := conn.QueryRow(ctx, s.Table.replacer().Replace(rawSQL("sql/nonempty_violations.sql"))).Scan(&n, &ids); err != nil {
		return 0, translate(err)
	}
	if n > 0 {
		log.Warn("migrate: rows with an empty aggregate_type, aggregate_id or event_type; new ones are refused, these stay until fixed or deleted, then run migrate again",
			slog.Int64("rows", n), slog.Any("first_ids", ids),
			slog.String("list", fmt.Sprintf("SELECT id FROM %s WHERE aggregate_type = '' OR aggregate_id = '' OR event_type = ''", s.Table.ident(""))))
		return n, nil
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, rawSQL("sql/migrate_lock_timeout.sql"), formatLockTimeout(lockTimeout)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "ALTER TABLE "+s.Table.ident("")+" VALIDATE CONSTRAINT "+s.Table.bare(suffixNonEmpty))
		return err
	})
	if isLockTimeout(err) {
		log.Warn("migrate: the check constraint refusing empty names is not validated yet (the table was locked); run migrate again",
			slog.String("constraint", name))
		return 0, nil
	}
	if err != nil {
		return 0, translate(err)
	}
	log.Info("migrate: validated the check constraint refusing empty names", slog.String("constraint", name))
	return 0, nil
}
