// Package sinkutil holds what every broker sink shares: destination-name
// templates over a message and the metadata each sink passes on.
package sinkutil

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxd/outbox"
)

// Metadata header (or property, or field) names. Brokers with headers carry
// all of them; the id also goes in the broker's own message-id slot where
// there is one (Nats-Msg-Id, AMQP message_id).
const (
	// HeaderID is the message's identity (outbox.Message.IDString), the key
	// to deduplicate on.
	HeaderID = "Outbox-Id"
	// HeaderRowID is the row's id in the outbox table, to find it there
	// (outboxd's console, the admin API). It is not an identity: a failover
	// or a sequence reset can give it to another message.
	HeaderRowID         = "Outbox-Row-Id"
	HeaderEventType     = "Outbox-Event-Type"
	HeaderAggregateType = "Outbox-Aggregate-Type"
	HeaderAggregateID   = "Outbox-Aggregate-Id"
	HeaderFencingToken  = "Outbox-Fencing-Token"
	HeaderAttempt       = "Outbox-Attempt"
	HeaderCreatedAt     = "Outbox-Created-At"
	// HeaderReplay marks a replayed delivery; its value is the replay's
	// name (outbox.ReplayHeader). Present only on replays.
	HeaderReplay = outbox.ReplayHeader
)

// Header is one metadata pair.
type Header struct{ Key, Value string }

func ownHeaders(m *outbox.Message) []Header {
	hs := []Header{
		{HeaderID, m.IDString()},
		{HeaderRowID, strconv.FormatInt(m.ID, 10)},
		{HeaderEventType, m.EventType},
		{HeaderAggregateType, m.AggregateType},
		{HeaderAggregateID, m.AggregateID},
		{HeaderFencingToken, strconv.FormatInt(m.FencingToken, 10)},
		{HeaderAttempt, strconv.Itoa(m.Attempt)},
		{HeaderCreatedAt, m.CreatedAt.UTC().Format("2006-01-02T15:04:05.999999999Z07:00")},
	}
	if r := m.Replay(); r != "" {
		hs = append(hs, Header{HeaderReplay, r})
	}
	return hs
}

// Template is a destination name with placeholders {aggregate_type},
// {event_type} and {aggregate_id}, expanded per message.
type Template struct {
	parts []part
	fixed bool
}

type part struct {
	lit   string
	field string // "" for a literal
}

// ParseTemplate parses s. An unknown or unclosed placeholder is an error, so
// a typo is caught at start-up rather than creating odd destinations.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{fixed: true}
	for s != "" {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			t.parts = append(t.parts, part{lit: s})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, part{lit: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unclosed placeholder in %q", s)
		}
		name := s[i+1 : i+j]
		switch name {
		case "aggregate_type", "event_type", "aggregate_id":
		default:
			return nil, fmt.Errorf("unknown placeholder {%s} (want {aggregate_type}, {event_type} or {aggregate_id})", name)
		}
		t.parts = append(t.parts, part{field: name})
		t.fixed = false
		s = s[i+j+1:]
	}
	return t, nil
}

// Fixed reports whether the template has no placeholder.
func (t *Template) Fixed() bool { return t.fixed }

// Expand returns the name for m. Values are substituted as they are; sinks
// whose names forbid some characters pass a sanitize function.
func (t *Template) Expand(m *outbox.Message, sanitize func(string) string) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.field == "" {
			b.WriteString(p.lit)
			continue
		}
		var v string
		switch p.field {
		case "aggregate_type":
			v = m.AggregateType
		case "event_type":
			v = m.EventType
		case "aggregate_id":
			v = m.AggregateID
		}
		if sanitize != nil {
			v = sanitize(v)
		}
		b.WriteString(v)
	}
	return b.String()
}

// String returns the template's source.
func (t *Template) String() string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.field == "" {
			b.WriteString(p.lit)
		} else {
			b.WriteString("{" + p.field + "}")
		}
	}
	return b.String()
}
