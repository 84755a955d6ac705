package sinkutil_test

import (
	"testing"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"outbox.{aggregate_type}.{event_type}", "{", "}", "{nope}", "a{aggregate_id}b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := sinkutil.ParseTemplate(s)
		if err != nil {
			return
		}
		if tpl.String() != s {
			t.Fatalf("%q round-trips as %q", s, tpl.String())
		}
		m := &outbox.Message{AggregateType: "A", EventType: "E", AggregateID: "I"}
		_ = tpl.Expand(m, nil)
	})
}
