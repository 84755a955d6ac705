package amqpsink_test

import (
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outbox/sink/sinktest"
)

// BenchmarkPublish measures confirmed, persistent publishes from many
// goroutines at once (32 per GOMAXPROCS) to a queue that a consumer drains,
// for several sizes of the channel pool.
func BenchmarkPublish(b *testing.B) {
	for _, channels := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("Channels%d", channels), func(b *testing.B) {
			a := newAdmin(b)
			r := a.queue(b, nil, "")
			s := newSink(b, upstream, url.Values{"routing_key": {r.name}, "channels": {strconv.Itoa(channels)}})

			b.SetParallelism(32)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Publish(b.Context(), sinktest.NewMessage("bench")); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
