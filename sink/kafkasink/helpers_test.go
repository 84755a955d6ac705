package kafkasink_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// newCluster starts an in-process Kafka cluster of one broker (franz-go's
// kfake), closed when the test ends. It allows topic auto-creation, which
// only the clients that ask for it (create_topics=true) get.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func clusterAddr(c *kfake.Cluster) string { return c.ListenAddrs()[0] }

var topicSeq atomic.Int64

// newTopic returns a fresh topic name.
func newTopic(prefix string) string {
	return fmt.Sprintf("%s.%d.%d", prefix, time.Now().UnixNano()%1e9, topicSeq.Add(1))
}

// createTopic creates topic with the given number of partitions.
func createTopic(t testing.TB, c *kfake.Cluster, topic string, partitions int32, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(clusterAddr(c))}, opts...)...)
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = partitions
	rt.ReplicationFactor = 1
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode), "create topic %s", topic)
}

// viaAddr is a dialer that sends every connection to addr. kfake advertises
// its own listener in metadata, so without it the client would reach the
// broker directly after bootstrapping through addr (the suite's proxy) and
// the proxy could not cut it off: this is the port-forward use of
// Options.Dialer.
func viaAddr(addr string) func(ctx context.Context, network, _ string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
}

// newSink builds a sink and closes it when the test ends.
func newSink(t testing.TB, rawURL string, opts *kafkasink.Options) *kafkasink.Sink {
	t.Helper()
	s, err := kafkasink.New(rawURL, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// record is one consumed record with its partition and offset.
type record struct {
	sinktest.Received
	Key       string
	Partition int32
	Offset    int64
	Headers   map[string]string
}

// consumer reads one topic from the start, straight from the broker. Each
// Receive returns the records not yet returned.
type consumer struct {
	cl *kgo.Client
}

func newConsumer(t testing.TB, addr, topic string, opts ...kgo.Opt) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &consumer{cl: cl}
}

// Records waits up to timeout for n records and returns those that came.
func (c *consumer) Records(t testing.TB, n int, timeout time.Duration) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []record
	for len(out) < n && ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil {
				t.Logf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			h := make(map[string]string, len(r.Headers))
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			out = append(out, record{
				Received: sinktest.Received{
					ID:      h[sinkutil.HeaderID],
					Payload: r.Value,
					Meta: map[string]string{
						"event_type":     h[sinkutil.HeaderEventType],
						"aggregate_type": h[sinkutil.HeaderAggregateType],
						"aggregate_id":   h[sinkutil.HeaderAggregateID],
						"fencing_token":  h[sinkutil.HeaderFencingToken],
						"attempt":        h[sinkutil.HeaderAttempt],
						"created_at":     h[sinkutil.HeaderCreatedAt],
					},
				},
				Key:       string(r.Key),
				Partition: r.Partition,
				Offset:    r.Offset,
				Headers:   h,
			})
		})
	}
	return out
}

// Receive implements sinktest.Receiver.
func (c *consumer) Receive(t *testing.T, n int, timeout time.Duration) []sinktest.Received {
	t.Helper()
	recs := c.Records(t, n, timeout)
	out := make([]sinktest.Received, len(recs))
	for i, r := range recs {
		out[i] = r.Received
	}
	return out
}
