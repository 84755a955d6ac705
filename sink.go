package outbox

import "context"

// Sink delivers messages to the outside world (a webhook, a broker, stdout).
//
// The contract every implementation keeps:
//
//   - Concurrency: Publish is called from many goroutines at once (one per
//     dispatcher worker) and must be safe for that. A sink may pipeline
//     publishes internally, but Publish returns only once the outcome of this
//     one message is known.
//   - Context: ctx carries the publish deadline, which is always shorter than
//     the message's lease, and is cancelled when the lease is known to be lost
//     or the process is shutting down hard. Publish must return promptly when
//     ctx is done, reporting a retryable error if the outcome is unknown.
//   - Acknowledgement: return nil only once the destination has durably
//     accepted the message (an HTTP 2xx, a broker ack or confirm). nil marks
//     the row done; it is never delivered again by this dispatcher.
//   - Classification: any failure is returned as [Retryable] /
//     [RetryableAfter] (transient: back off and try again, consuming an
//     attempt), [Permanent] (dead at once, for an operator), or [Defer]
//     (not yet, for a business reason: pending later, attempt refunded). An
//     error that is none of these is treated as retryable and logged at error
//     level as unclassified, because it usually means the sink is missing a
//     case. A panic is recovered and sends the message dead with the panic
//     value in last_error: it is a bug, and retrying a bug hides it.
//   - Identity: the destination must receive Message.ID as its deduplication
//     key (Idempotency-Key, Nats-Msg-Id, AMQP message_id, a Kafka header...),
//     and should receive EventType, AggregateType, AggregateID, FencingToken
//     and Attempt as metadata. Fencing protects the database, not the world:
//     a message may be published more than once, and the ID is how the
//     receiver tells.
//   - Payload: Payload is passed on byte for byte; a sink never re-encodes it.
//
// Close is called once, after the last Publish has returned.
type Sink interface {
	Publish(ctx context.Context, msg *Message) error
	Close() error
}

// SinkFunc adapts a function to a [Sink] whose Close does nothing.
type SinkFunc func(ctx context.Context, msg *Message) error

// Publish calls f.
func (f SinkFunc) Publish(ctx context.Context, msg *Message) error { return f(ctx, msg) }

// Close does nothing.
func (SinkFunc) Close() error { return nil }
