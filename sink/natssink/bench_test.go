package natssink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/sinktest"
)

// BenchmarkPublish publishes from 16 goroutines per CPU (as many dispatcher
// workers would) to a file-backed stream and reports acknowledged messages
// per second.
func BenchmarkPublish(b *testing.B) {
	js := admin(b, upstream)
	prefix, _ := newStream(b, js, func(c *jetstream.StreamConfig) { c.Storage = jetstream.FileStorage })
	s := newSink(b, "nats://"+upstream+"?subject="+prefix+".{aggregate_type}.{event_type}", nil)
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := s.Publish(b.Context(), sinktest.NewMessage(fmt.Sprint(i%64))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	require.NotZero(b, b.N)
}
