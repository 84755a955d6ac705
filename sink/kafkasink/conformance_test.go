package kafkasink_test

import (
	"testing"
	"time"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	sinktest.Run(t, sinktest.Harness{
		Upstream: clusterAddr(c),
		New: func(t *testing.T, addr string) (outbox.Sink, sinktest.Receiver) {
			topic := newTopic("conf")
			createTopic(t, c, topic, 3)
			s := newSink(t, "kafka://"+addr+"?topic="+topic, &kafkasink.Options{Dialer: viaAddr(addr)})
			return s, newConsumer(t, clusterAddr(c), topic)
		},
		// No such topic, and the sink does not create topics.
		Permanent: func(t *testing.T, addr string) (outbox.Sink, *outbox.Message) {
			s := newSink(t, "kafka://"+addr+"?topic="+newTopic("missing"), &kafkasink.Options{Dialer: viaAddr(addr)})
			return s, sinktest.NewMessage("a")
		},
		DownTimeout: 2 * time.Second,
	})
}
