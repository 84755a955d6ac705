package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outbox/internal/store"
)

//go:embed sql/*.sql
var files embed.FS

// Defaults for [New] and [Inbox.Purge].
const (
	// TableDefault is the inbox table [New] uses for "".
	TableDefault = "outbox_inbox"
	// PurgeBatchDefault is how many ids one purge statement deletes at
	// most when Purge is given a batch of 0.
	PurgeBatchDefault = 1000
)

// receivedSuffix names the retention index after the table.
const receivedSuffix = "_received_at"

// maxName keeps the index name (table name + receivedSuffix) within
// PostgreSQL's 63-byte identifier limit, which would otherwise truncate it
// silently into a name another table's index may share.
const maxName = 63 - len(receivedSuffix)

// DB is a pgx pool or connection: what [Inbox.Migrate] and [Inbox.Purge]
// need.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Inbox records which messages each consumer has applied, in one table.
// It is safe for concurrent use: it holds only the statements for its table.
type Inbox struct {
	name    string // as the caller wrote it, for errors and the lock key
	schema  string // "" when the name is resolved through search_path
	migrate string
	record  string
	purge   string
}

// New returns an Inbox on table, "name" or "schema.name" ("" means
// [TableDefault]). Both parts may hold any characters; they are always
// quoted as identifiers.
func New(table string) (*Inbox, error) {
	if table == "" {
		table = TableDefault
	}
	t, err := store.ParseName(table, maxName)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	r := strings.NewReplacer(
		"{{table}}", t.Quoted(),
		"{{received_index}}", pgx.Identifier{t.Name + receivedSuffix}.Sanitize(),
	)
	load := func(file string) string {
		b, err := files.ReadFile("sql/" + file)
		if err != nil {
			panic(err) // embedded at build time; absence is a build bug
		}
		return r.Replace(string(b))
	}
	return &Inbox{
		name:    table,
		schema:  t.Schema,
		migrate: load("migrate.sql"),
		record:  load("record.sql"),
		purge:   load("purge.sql"),
	}, nil
}

// Migrate creates the inbox table and its retention index if they do not
// exist (and the schema, for a qualified name). It is idempotent and runs
// in one transaction under an advisory lock keyed on the table name, so
// concurrent migrations of the same table serialise.
func (ib *Inbox) Migrate(ctx context.Context, db DB) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", ib.name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit this is a no-op
	if err := store.LockMigrationTx(ctx, tx, "outboxd inbox migrate "+ib.name, nil); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", ib.name, err)
	}
	if ib.schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{ib.schema}.Sanitize()); err != nil {
			return fmt.Errorf("inbox: migrate %s: %w", ib.name, err)
		}
	}
	// Simple protocol: the migration is several statements in one string.
	if _, err := tx.Exec(ctx, ib.migrate, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", ib.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", ib.name, err)
	}
	return nil
}

// Apply runs handler for message messageID of consumer, once.
//
// tx is the consumer's own transaction; Apply records the id in it and, if
// the id was new, runs handler in it and returns applied = true. If the id
// was already recorded, by a committed transaction or earlier in this one,
// handler does not run and Apply returns applied = false: the message is a
// duplicate, which the caller must treat as a success (a 2xx, an ack), or
// the sender keeps redelivering it.
//
// If handler returns an error, Apply returns it unchanged with applied =
// false. The id is then recorded in tx, so the caller must roll tx back (as
// it would for any failed change), which forgets the id and lets a
// redelivery apply the message. Committing tx after an error would mark the
// message applied without its effect.
//
// consumer names the receiving application or handler: each consumer of the
// same messages keeps its own record. See the package documentation for
// concurrent deliveries and isolation levels.
func (ib *Inbox) Apply(ctx context.Context, tx pgx.Tx, consumer, messageID string,
	handler func(ctx context.Context, tx pgx.Tx) error,
) (applied bool, err error) {
	if err := checkApply(consumer, messageID, handler == nil); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, ib.record, consumer, messageID)
	if err != nil {
		return false, ib.recordErr(consumer, messageID, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if err := handler(ctx, tx); err != nil {
		return false, err
	}
	return true, nil
}

// ApplySQL is [Inbox.Apply] for a database/sql transaction on a PostgreSQL
// driver (such as github.com/jackc/pgx/v5/stdlib).
func (ib *Inbox) ApplySQL(ctx context.Context, tx *sql.Tx, consumer, messageID string,
	handler func(ctx context.Context, tx *sql.Tx) error,
) (applied bool, err error) {
	if err := checkApply(consumer, messageID, handler == nil); err != nil {
		return false, err
	}
	if tx == nil {
		return false, errors.New("inbox: ApplySQL needs a transaction")
	}
	res, err := tx.ExecContext(ctx, ib.record, consumer, messageID)
	if err != nil {
		return false, ib.recordErr(consumer, messageID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, ib.recordErr(consumer, messageID, err)
	}
	if n == 0 {
		return false, nil
	}
	if err := handler(ctx, tx); err != nil {
		return false, err
	}
	return true, nil
}

func checkApply(consumer, messageID string, nilHandler bool) error {
	switch {
	case consumer == "":
		return errors.New("inbox: consumer is empty")
	case messageID == "":
		// An empty key would make every keyless message a duplicate of the
		// first one.
		return errors.New("inbox: message id is empty")
	case nilHandler:
		return errors.New("inbox: handler is nil")
	}
	return nil
}

func (ib *Inbox) recordErr(consumer, messageID string, err error) error {
	return fmt.Errorf("inbox: recording message %q for consumer %q in %s: %w", messageID, consumer, ib.name, err)
}

// Purge deletes the ids received more than olderThan ago, in statements of
// at most batch rows each (0 means [PurgeBatchDefault]), so no statement
// holds many locks or a long transaction. It returns how many it deleted;
// on an error or a cancelled ctx, the batches already deleted stay deleted
// and are counted.
//
// A message redelivered after its id was purged is applied again. olderThan
// must therefore exceed the longest delay after which a duplicate can still
// arrive (see the package documentation); this is the one way an inbox can
// let a duplicate through.
func (ib *Inbox) Purge(ctx context.Context, db DB, olderThan time.Duration, batch int) (int64, error) {
	switch {
	case olderThan <= 0:
		// Zero would forget ids of messages still being redelivered.
		return 0, fmt.Errorf("inbox: purge retention must be positive, got %s", olderThan)
	case batch < 0:
		return 0, fmt.Errorf("inbox: purge batch must not be negative, got %d", batch)
	case batch == 0:
		batch = PurgeBatchDefault
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox: purge %s: %w", ib.name, err)
		}
		tag, err := db.Exec(ctx, ib.purge, olderThan.Microseconds(), batch)
		if err != nil {
			return total, fmt.Errorf("inbox: purge %s: %w", ib.name, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// ReplayKey is the key to record a delivery under when replays
// (outboxd replay, header Outbox-Replay) must be applied again: messageID
// for an ordinary delivery, "ID/replay/NAME" for a replay, the same form
// as outbox.Message.DedupeKey. Every delivery of one replay maps to one key,
// so a replay is still applied at most once. Record under messageID alone
// to treat a replay as a duplicate of what was applied before.
func ReplayKey(messageID, replay string) string {
	if replay == "" {
		return messageID
	}
	return messageID + "/replay/" + replay
}
