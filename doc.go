// Package outbox relays a PostgreSQL transactional outbox to the outside
// world: webhooks, NATS JetStream, RabbitMQ, Kafka, Redis Streams, MQTT.
//
// An application writes an event row into the outbox table in the same
// transaction as its business change ([Enqueue], [Producer], or a plain
// INSERT). A [Dispatcher] delivers each row at least once, with any number
// of dispatchers in any number of processes, and never corrupts the table's
// state:
//
//   - Claim: one short statement leases a batch of rows by writing
//     status 'processing', lease_owner, lease_until = now() + lease, a new
//     lease_version (the fencing token) and attempts + 1. Row locks die at
//     COMMIT; the written lease does not.
//   - Publish: outside any transaction, through a [Sink]. The row id travels
//     as the downstream deduplication key ([Message.ID]).
//   - Finalize: every later write is fenced on the token. A write that
//     matches no row means the lease was lost ([ErrLeaseLost]); the stale
//     result is dropped instead of overwriting the new owner's.
//
// Expired leases are claimed again; rows that used up [Config.MaxAttempts]
// and expired are reaped to 'dead'. A sink's error decides the outcome:
// nil is done, [Retryable] backs off with full jitter ([FullJitter]),
// [Defer] postpones without spending an attempt, [Unavailable] (a condition
// of the sink's connection) retries without spending one, [Permanent] sends
// the message dead. With [Config.Ordered], only the head unfinished message
// of each aggregate is claimable, so each aggregate is delivered in order.
//
// Fencing protects the database, not the world: a dispatcher that stalls
// past its lease may publish a message that another has published again.
// Receivers deduplicate on the message id; package inbox does it in the
// consumer's own transaction.
//
// # Getting started
//
// Create the table with [Admin.Migrate] (or `outboxd migrate`), build a sink
// (packages under sink/, or a [SinkFunc]), and run a dispatcher:
//
//	d, err := outbox.NewDispatcher(pool, sink, &outbox.Config{Table: "outbox"})
//	if err != nil { ... }
//	err = d.Run(ctx) // until ctx is cancelled; or d.Start / d.Stop
//
// [Dispatcher.Drain] delivers what is deliverable and returns. [Admin]
// reports status and gauges and handles dead letters; [Hook] observes
// claims, outcomes and heartbeats (package metrics turns them into
// Prometheus metrics).
//
// Every time the relay acts on comes from the database's now(); no worker's
// clock matters. docs/state_machine.md draws the row's states.
package outbox
