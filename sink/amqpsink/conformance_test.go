package amqpsink_test

import (
	"net/url"
	"testing"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	sinktest.Run(t, sinktest.Harness{
		Upstream: upstream,
		New: func(t *testing.T, addr string) (outbox.Sink, sinktest.Receiver) {
			// The default exchange routes by queue name.
			r := a.queue(t, nil, "")
			s := newSink(t, addr, url.Values{"routing_key": {r.name}, "reconnect_max": {"500ms"}})
			return s, r
		},
		Permanent: func(t *testing.T, addr string) (outbox.Sink, *outbox.Message) {
			// mandatory (the default) with no queue of that name: returned.
			s := newSink(t, addr, url.Values{"routing_key": {uniqueName("amqpsink-test-nobody")}})
			return s, sinktest.NewMessage("a")
		},
	})
}
