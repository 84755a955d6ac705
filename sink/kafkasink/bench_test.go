package kafkasink_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outbox/sink/sinktest"
)

// BenchmarkPublish measures acknowledged publishes per second from many
// goroutines (as many dispatcher workers would) against an in-process kfake
// broker with acks=all.
func BenchmarkPublish(b *testing.B) {
	c := newCluster(b)
	topic := newTopic("bench")
	createTopic(b, c, topic, 8)
	s := newSink(b, "kafka://"+clusterAddr(c)+"?topic="+topic, nil)
	var seq atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := sinktest.NewMessage(fmt.Sprintf("agg-%d", seq.Add(1)%64))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.Publish(ctx, m)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
