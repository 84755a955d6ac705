package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox/internal/store"
)

// NewMessage is a message for [Enqueue].
type NewMessage struct {
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is stored as jsonb. json.RawMessage and []byte are taken as
	// JSON text (and must be valid JSON); anything else is marshalled with
	// encoding/json.
	Payload any
	// Headers are optional metadata every sink passes on with the message
	// (trace context such as traceparent, correlation ids). Stored in the
	// headers column; nil stores NULL.
	Headers map[string]string
}

// Producer writes messages to one outbox table. The zero value writes to
// the default table "outbox".
type Producer struct {
	// Table is "name" or "schema.name". Defaults to "outbox".
	Table string
}

// Enqueue inserts msgs into the default table inside tx, the producer's own
// transaction, so the messages commit or roll back with the business change.
// tx is a pgx transaction (pgx.Tx, or anything with pgx's Query method) or a
// database/sql transaction (*sql.Tx, or anything with QueryContext). It
// returns the new ids in the order of msgs.
//
// A pool, a connection or a *sql.DB (*pgxpool.Pool, *pgx.Conn, *sql.DB,
// *sql.Conn: anything that can begin a transaction but is not one) is
// refused with a [*NotInTransactionError] before anything is written: an
// insert there would commit on its own, apart from the business change.
func Enqueue(ctx context.Context, tx any, msgs ...NewMessage) ([]int64, error) {
	return Producer{}.Enqueue(ctx, tx, msgs...)
}

type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type sqlQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// NotInTransactionError is returned by [Enqueue] when given something that
// begins transactions (a pool, a connection, a *sql.DB) instead of a
// transaction. errors.Is(err, &NotInTransactionError{}) matches any of them.
type NotInTransactionError struct {
	// Type is the Go type that was passed, such as "*pgxpool.Pool".
	Type string
}

func (e *NotInTransactionError) Error() string {
	return "outbox: enqueue: " + e.Type + " is not a transaction: begin one (pool.Begin, db.BeginTx) and enqueue inside it " +
		"so the messages commit or roll back with the business change"
}

// Is matches any *NotInTransactionError.
func (e *NotInTransactionError) Is(target error) bool {
	_, ok := target.(*NotInTransactionError)
	return ok
}

// notInTransaction reports whether tx can begin a transaction but cannot
// commit one: a pool or connection in autocommit, not a transaction.
// pgx.Tx also has Begin (a savepoint), but it has Commit as well.
func notInTransaction(tx any) bool {
	type pgxBeginner interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
	type sqlBeginner interface {
		BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	}
	type committer interface {
		Commit(ctx context.Context) error
	}
	if _, ok := tx.(sqlBeginner); ok {
		return true
	}
	if _, ok := tx.(pgxBeginner); ok {
		_, commits := tx.(committer)
		return !commits
	}
	return false
}

// maxEnqueueRows keeps one INSERT's parameters under PostgreSQL's 65535.
const maxEnqueueRows = 65535 / store.InsertParams

// Enqueue is [Enqueue] on p's table.
func (p Producer) Enqueue(ctx context.Context, tx any, msgs ...NewMessage) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if notInTransaction(tx) {
		return nil, &NotInTransactionError{Type: fmt.Sprintf("%T", tx)}
	}
	table := p.Table
	if table == "" {
		table = TableDefault
	}
	st, err := store.New(table)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	ids := make([]int64, 0, len(msgs))
	for start := 0; start < len(msgs); start += maxEnqueueRows {
		chunk := msgs[start:min(start+maxEnqueueRows, len(msgs))]
		args := make([]any, 0, store.InsertParams*len(chunk))
		for i, m := range chunk {
			payload, err := encodePayload(m.Payload)
			if err != nil {
				return nil, fmt.Errorf("outbox: message %d: %w", start+i, err)
			}
			if m.AggregateType == "" || m.AggregateID == "" || m.EventType == "" {
				return nil, fmt.Errorf("outbox: message %d: AggregateType, AggregateID and EventType are required", start+i)
			}
			var headers any // untyped nil: SQL NULL through any driver
			if len(m.Headers) > 0 {
				h, err := json.Marshal(m.Headers)
				if err != nil {
					return nil, fmt.Errorf("outbox: message %d: headers: %w", start+i, err)
				}
				headers = string(h)
			}
			args = append(args, m.AggregateType, m.AggregateID, m.EventType, payload, headers)
		}
		q := st.InsertSQL(len(chunk))
		got, err := insert(ctx, tx, q, args)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

func insert(ctx context.Context, tx any, q string, args []any) ([]int64, error) {
	switch tx := tx.(type) {
	case pgxQuerier:
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("outbox: enqueue: %w", translateProducerErr(err))
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, fmt.Errorf("outbox: enqueue: %w", translateProducerErr(err))
		}
		return ids, nil
	case sqlQuerier:
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("outbox: enqueue: %w", translateProducerErr(err))
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return nil, fmt.Errorf("outbox: enqueue: %w", err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("outbox: enqueue: %w", translateProducerErr(err))
		}
		return ids, nil
	default:
		return nil, fmt.Errorf("outbox: enqueue: unsupported transaction type %T (want pgx.Tx or *sql.Tx)", tx)
	}
}

func translateProducerErr(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return store.Translate(err)
}

func encodePayload(p any) (string, error) {
	switch v := p.(type) {
	case nil:
		return "", errors.New("payload is required")
	case json.RawMessage:
		if !json.Valid(v) {
			return "", errors.New("payload is not valid JSON")
		}
		return string(v), nil
	case []byte:
		if !json.Valid(v) {
			return "", errors.New("payload is not valid JSON")
		}
		return string(v), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("payload: %w", err)
		}
		return string(b), nil
	}
}
