// Package inbox is the consumer half of "effectively once": it lets a
// receiver of outboxd's messages apply each one exactly once to its own
// database, however many times it is delivered.
//
// # Why a receiver needs it
//
// outboxd delivers at least once. Its lease and fencing token keep the
// outbox table itself consistent (a worker whose lease was taken over cannot
// finalize the row), but they protect the database, not the world: a worker
// may publish, lose its lease or its connection before it records success,
// and the message is published again. A broker may redeliver a message
// whose acknowledgement was lost; an operator may retry a dead message that
// had in fact arrived. No sender-side mechanism can make these duplicates
// impossible, because "published" and "recorded as published" are two
// systems that cannot commit together.
//
// The receiver can close the gap, because its effect and its memory of the
// message can commit together. Every delivery carries the message's identity as its
// deduplication key (the Idempotency-Key header of a webhook, Nats-Msg-Id
// on NATS, a message id or header elsewhere). [Inbox.Apply] inserts
// (consumer, message id) into the inbox table inside the consumer's own
// transaction and runs the business change in that same transaction only if
// the insert was new. The id and the effect commit or roll back as one, so:
//
//	at-least-once delivery + inbox = effectively once
//
// # Which key
//
// The identity sinks send is the row's uid, a random UUID the database
// gives each message at insert, not its numeric id: after a failover to a
// standby that lacked the newest rows, a point-in-time restore or a
// sequence reset, an outbox table gives the ids of messages already
// delivered to new ones, and an inbox keyed on them would drop the new
// messages as duplicates. Rows inserted before the uid column are sent
// under their decimal id; with several tables feeding one inbox and such
// rows still undelivered, give each table its own namespace (outboxd run
// --id-namespace orders, or Config.IDNamespace), so "orders:42" and
// "payments:42" stay apart. Record under the key exactly as the sink sent
// it.
//
// # Concurrency
//
// Two deliveries of one message may race (two webhook requests, two
// consumers of a queue). The second INSERT of the same key waits on the
// first's uncommitted row: if the first commits, the second sees the
// conflict and reports the message as already applied; if it rolls back, the
// second inserts and applies. Exactly one transaction applies the message.
// This holds at READ COMMITTED, PostgreSQL's default. At REPEATABLE READ or
// SERIALIZABLE the loser of the race instead fails with a serialization
// failure (SQLSTATE 40001), as any conflicting write does there; retry its
// transaction and the retry sees the message as applied.
//
// # Retention
//
// The inbox grows by one row per message. [Inbox.Purge] deletes ids older
// than a retention period. A delivery of a message whose id has been purged
// is applied again, so the retention must exceed the longest delay after
// which a duplicate can still arrive: on the outboxd side, a lease plus the
// sum of retry backoffs over all attempts (up to MaxAttempts × RetryCap), and
// the time an operator may take before retrying a dead message; on a broker,
// its redelivery and retention settings. Days or weeks are typical; the
// rows are small.
//
// # Replays
//
// An operator may deliver done messages again (outboxd replay): a replayed
// delivery keeps its message id and carries header Outbox-Replay with the
// replay's name. Recorded under the id alone, a replay of a message already
// applied is a duplicate and is not applied, which suits a replay meant for
// other receivers (one that lost its data, a new one). To apply replays
// again, record under [ReplayKey](id, replay): each replay is then applied
// once, and its own redeliveries are still duplicates.
//
// # Usage
//
//	ib, err := inbox.New("") // table "outbox_inbox"
//	...
//	err = ib.Migrate(ctx, pool)
//	...
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		applied, err := ib.Apply(ctx, tx, "billing", key, func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "UPDATE accounts SET ...")
//			return err
//		})
//		...
//	})
//
// A duplicate (applied == false) is a success: answer it as one (a 2xx, an
// ack), or the sender keeps redelivering it.
package inbox
