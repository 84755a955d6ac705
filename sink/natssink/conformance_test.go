package natssink_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	sinktest.Run(t, sinktest.Harness{
		Upstream: upstream,
		New: func(t *testing.T, addr string) (outbox.Sink, sinktest.Receiver) {
			prefix, stream := newStream(t, js, nil)
			// A debug logger runs every logging path under the race detector.
			log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
			s := newSink(t, "nats://"+addr+"?subject="+prefix+".{aggregate_type}.{event_type}", &natssink.Options{Logger: log})
			return s, newReceiver(js, stream)
		},
		Permanent: func(t *testing.T, addr string) (outbox.Sink, *outbox.Message) {
			// No stream takes this subject.
			s := newSink(t, "nats://"+addr+"?subject="+uniqueName("nostream")+".{event_type}", nil)
			return s, sinktest.NewMessage("a")
		},
	})
}
