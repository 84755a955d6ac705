package outbox

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Message is one claimed outbox row as a [Sink] sees it.
//
// UID is the message's identity: in the form [Message.IDString] gives
// (with the dispatcher's IDNamespace, if any) it is the key downstream
// systems deduplicate on, and every sink passes it on. ID is the row's
// primary key, the order the table keeps; it is not an identity, since a
// failover to a standby that lacked the newest rows, a point-in-time
// restore or a sequence reset gives the ids of messages already delivered
// to new ones.
type Message struct {
	// ID is the outbox row id.
	ID int64
	// UID is the row's uid column, a UUID the database gives each row at
	// insert (or the producer's own, if it sets the column), in its
	// canonical text form. It is "" for a row inserted before migration
	// 006 added the column: such a row keeps its numeric id as identity.
	UID string
	// IDNamespace is the dispatcher's [Config.IDNamespace] ("" for none):
	// it qualifies the id sinks send, so receivers fed by several tables, or
	// by one table after its identity restarted, tell messages apart.
	IDNamespace string
	// AggregateType is the kind of entity the event is about (e.g. "order").
	AggregateType string
	// AggregateID identifies the entity; ordering is kept per AggregateID.
	AggregateID string
	// EventType names the event (e.g. "OrderCreated").
	EventType string
	// Payload is the row's jsonb payload, as JSON text.
	Payload json.RawMessage
	// CreatedAt is when the producer inserted the row (database time).
	CreatedAt time.Time
	// Attempt counts the claims of this row so far, this one included
	// (1 on the first delivery attempt).
	Attempt int
	// FencingToken is the row's lease_version for this claim. It grows on
	// every claim, so a receiver that stores the highest token it has seen
	// per message can reject a stale delivery.
	FencingToken int64
	// Headers are the producer's metadata for the message (the headers
	// column), passed on by every sink; nil when there are none. A sink
	// never lets them override its own protocol headers.
	Headers map[string]string

	// dropped are the names of Headers the sink did not send.
	dropped []string
}

// DropHeader records that the sink leaves the producer header name (a key
// of Headers) out of what it sends: a name its protocol reserves, or a
// name or value it cannot carry. Every sink calls it for each such header;
// the dispatcher logs them, once per message (on its first attempt).
func (m *Message) DropHeader(name string) { m.dropped = append(m.dropped, name) }

// DroppedHeaders returns the names given to DropHeader during this
// publish, sorted.
func (m *Message) DroppedHeaders() []string {
	out := slices.Clone(m.dropped)
	slices.Sort(out)
	return slices.Compact(out)
}

// IDString returns the message's identity as every sink sends it
// (Idempotency-Key, ce-id, webhook-id, Outbox-Id, each broker's message
// id): UID, or ID in decimal for a row without one, prefixed with
// "NAMESPACE:" when the dispatcher has an IDNamespace
// ("orders:0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21").
func (m *Message) IDString() string {
	id := m.UID
	if id == "" {
		id = strconv.FormatInt(m.ID, 10)
	}
	if m.IDNamespace != "" {
		return m.IDNamespace + ":" + id
	}
	return id
}

// Replay returns the name of the replay delivering this message again
// ([Admin.Replay], header Outbox-Replay), or "" for an ordinary delivery.
func (m *Message) Replay() string { return m.Headers[ReplayHeader] }

// DedupeKey is the key a deduplication that must let a replay through
// uses: [Message.IDString], or for a replay "ID/replay/NAME". Every delivery
// of one replay has the same key, so redeliveries of a replay are still
// deduplicated, but it differs from the original delivery's. Broker-side
// deduplication (Nats-Msg-Id, Redis IDMP) uses it; the message id itself is
// unchanged everywhere.
func (m *Message) DedupeKey() string {
	if r := m.Replay(); r != "" {
		return m.IDString() + "/replay/" + r
	}
	return m.IDString()
}
