package sinkutil

import (
	"sort"
	"strings"

	"github.com/outboxd/outbox"
)

// Reserved is a sink's set of header names that a message's own headers
// (m.Headers) may not set: the headers the sink writes itself and those its
// protocol gives a meaning. Names are compared without regard to case.
// Names starting with "Outbox-" are always reserved. Each sink declares its
// set in one place and builds its headers through it.
type Reserved struct {
	// Names are reserved exactly.
	Names []string
	// Prefixes reserve every name starting with one of them.
	Prefixes []string
}

// Has reports whether name is reserved.
func (r Reserved) Has(name string) bool {
	if hasPrefixFold(name, "Outbox-") {
		return true
	}
	for _, n := range r.Names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	for _, p := range r.Prefixes {
		if p != "" && hasPrefixFold(name, p) {
			return true
		}
	}
	return false
}

// Headers returns the metadata of m in a fixed order: the Outbox-* headers,
// then the producer's headers (m.Headers, e.g. traceparent) sorted by name,
// leaving out those r reserves and empty names (each reported to
// m.DropHeader). Every other producer header passes, so a "Nats-" header
// reaches a Kafka, AMQP or MQTT consumer untouched.
func (r Reserved) Headers(m *outbox.Message) []Header {
	hs := ownHeaders(m)
	if len(m.Headers) == 0 {
		return hs
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if k == "" || r.Has(k) {
			m.DropHeader(k)
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs = append(hs, Header{k, m.Headers[k]})
	}
	return hs
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// NotSent says why no sink sends a producer header ("" when some may): an
// empty name, or a name under Outbox-, which every sink reserves for its
// own. Each sink may leave out more (its protocol's names; see its own).
func NotSent(name string) string {
	switch {
	case name == "":
		return "an empty name"
	case hasPrefixFold(name, "Outbox-"):
		return "Outbox- names are the relay's own"
	}
	return ""
}
