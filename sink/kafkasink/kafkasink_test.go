package kafkasink_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func publish(t testing.TB, s *kafkasink.Sink, m *outbox.Message, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.Publish(ctx, m)
}

// publishUntilAcked retries m, as the dispatcher would, until it is
// acknowledged; every failure on the way must be retryable.
func publishUntilAcked(t *testing.T, s *kafkasink.Sink, m *outbox.Message, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := publish(t, s, m, 2*time.Second)
		if err == nil {
			return
		}
		require.True(t, outbox.IsRetryable(err), "want retryable while recovering, got %v", err)
		require.True(t, time.Now().Before(deadline), "sink did not recover: %v", err)
		<-tick.C
	}
}

func TestRecordCarriesKeyHeadersAndPayload(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic("rec")
	createTopic(t, c, topic, 3)
	s := newSink(t, "kafka://"+clusterAddr(c)+"?topic="+topic, nil)

	m := sinktest.NewMessage("order-7")
	m.CreatedAt = time.Date(2025, 3, 4, 5, 6, 7, 891000000, time.UTC)
	require.NoError(t, publish(t, s, m, 10*time.Second))

	got := newConsumer(t, clusterAddr(c), topic).Records(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, "order-7", got[0].Key, "the key is the aggregate id")
	require.Equal(t, string(m.Payload), string(got[0].Payload))
	require.Equal(t, map[string]string{
		sinkutil.HeaderID:            m.IDString(),
		sinkutil.HeaderRowID:         strconv.FormatInt(m.ID, 10),
		sinkutil.HeaderEventType:     "OrderCreated",
		sinkutil.HeaderAggregateType: "order",
		sinkutil.HeaderAggregateID:   "order-7",
		sinkutil.HeaderFencingToken:  "7",
		sinkutil.HeaderAttempt:       "2",
		sinkutil.HeaderCreatedAt:     "2025-03-04T05:06:07.891Z",
	}, got[0].Headers)
}

// TestProducerHeadersPass: Kafka reserves no header names, so a producer's
// Nats-* header arrives like any other; only Outbox-* stays the sink's own.
func TestProducerHeadersPass(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic("hdr")
	createTopic(t, c, topic, 1)
	s := newSink(t, "kafka://"+clusterAddr(c)+"?topic="+topic, nil)

	m := sinktest.NewMessage("order-7")
	m.Headers = map[string]string{"Nats-Msg-Id": "from-producer", "traceparent": "00-1", "Outbox-Id": "forged"}
	require.NoError(t, publish(t, s, m, 10*time.Second))

	got := newConsumer(t, clusterAddr(c), topic).Records(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, "from-producer", got[0].Headers["Nats-Msg-Id"])
	require.Equal(t, "00-1", got[0].Headers["traceparent"])
	require.Equal(t, m.IDString(), got[0].Headers[sinkutil.HeaderID])
}

func TestTopicTemplateIsExpandedAndSanitized(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	prefix := newTopic("tpl")
	s := newSink(t, "kafka://"+clusterAddr(c)+"?create_topics=true&topic="+prefix+".{aggregate_type}.{event_type}", nil)

	m := sinktest.NewMessage("a")
	m.AggregateType = "Order Line/ü"
	m.EventType = "Created:v2"
	require.NoError(t, publish(t, s, m, 10*time.Second))

	// Each forbidden character (one rune, whatever its UTF-8 length)
	// becomes one '_'.
	got := newConsumer(t, clusterAddr(c), prefix+".Order_Line__.Created_v2").Records(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, m.IDString(), got[0].ID)
}

func TestUnusableExpandedTopicIsPermanent(t *testing.T) {
	t.Parallel()
	// Nothing listens there: these must fail before any network access.
	s := newSink(t, "kafka://127.0.0.1:1?topic={aggregate_id}", nil)
	for _, aggID := range []string{"", ".", "..", strings.Repeat("x", 250)} {
		m := sinktest.NewMessage(aggID)
		start := time.Now()
		err := publish(t, s, m, 5*time.Second)
		require.Error(t, err, "aggregate id %q", aggID)
		require.True(t, outbox.IsPermanent(err), "aggregate id %q: want permanent, got %v", aggID, err)
		require.Less(t, time.Since(start), time.Second)
	}
	require.NoError(t, publishNoWait(s, sinktest.NewMessage(strings.Repeat("x", 249))), "249 characters is legal")
}

// publishNoWait only checks that a publish is not refused up front.
func publishNoWait(s *kafkasink.Sink, m *outbox.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Publish(ctx, m); outbox.IsPermanent(err) {
		return err
	}
	return nil
}

func TestSameAggregateKeepsPartitionAndOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic("order")
	createTopic(t, c, topic, 6)
	s := newSink(t, "kafka://"+clusterAddr(c)+"?topic="+topic, nil)

	const aggregates, perAggregate = 12, 25
	// One goroutine per aggregate publishes its events one after the other,
	// as the dispatcher does for ordered claims; the aggregates interleave.
	sent := make([][]string, aggregates)
	var wg sync.WaitGroup
	errs := make(chan error, aggregates)
	for a := range aggregates {
		wg.Go(func() {
			for range perAggregate {
				m := sinktest.NewMessage(fmt.Sprintf("agg-%d", a))
				if err := publish(t, s, m, 10*time.Second); err != nil {
					errs <- err
					return
				}
				sent[a] = append(sent[a], m.IDString())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	got := newConsumer(t, clusterAddr(c), topic).Records(t, aggregates*perAggregate, 20*time.Second)
	require.Len(t, got, aggregates*perAggregate)
	partitionOf := map[string]int32{}
	lastOffset := map[string]int64{}
	received := map[string][]string{}
	usedPartitions := map[int32]bool{}
	for _, r := range got {
		if p, ok := partitionOf[r.Key]; ok {
			require.Equal(t, p, r.Partition, "aggregate %s split across partitions", r.Key)
			require.Greater(t, r.Offset, lastOffset[r.Key])
		}
		partitionOf[r.Key] = r.Partition
		lastOffset[r.Key] = r.Offset
		usedPartitions[r.Partition] = true
		received[r.Key] = append(received[r.Key], r.ID)
	}
	for a := range aggregates {
		key := fmt.Sprintf("agg-%d", a)
		require.Equal(t, sent[a], received[key], "aggregate %s out of publish order", key)
	}
	require.Greater(t, len(usedPartitions), 1, "keys should spread over the partitions")
}

func TestRepublishLandsAgainWithTheSameID(t *testing.T) {
	t.Parallel()
	// Kafka has no broker-side deduplication for an application id: a
	// message published twice (a retry after a lost ack) is two records
	// that share their Outbox-Id, the key receivers deduplicate on.
	c := newCluster(t)
	topic := newTopic("dup")
	createTopic(t, c, topic, 1)
	s := newSink(t, "kafka://"+clusterAddr(c)+"?topic="+topic, nil)
	m := sinktest.NewMessage("a")
	require.NoError(t, publish(t, s, m, 10*time.Second))
	m.Attempt++
	require.NoError(t, publish(t, s, m, 10*time.Second))

	got := newConsumer(t, clusterAddr(c), topic).Records(t, 2, 10*time.Second)
	require.Len(t, got, 2)
	require.Equal(t, m.IDString(), got[0].ID)
	require.Equal(t, m.IDString(), got[1].ID)
	require.Equal(t, []string{"2", "3"}, []string{got[0].Meta["attempt"], got[1].Meta["attempt"]})
}

func TestCreateTopics(t *testing.T) {
	t.Parallel()
	t.Run("CreatedWhenAllowed", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		topic := newTopic("auto")
		s := newSink(t, "kafka://"+clusterAddr(c)+"?create_topics=true&topic="+topic, nil)
		m := sinktest.NewMessage("a")
		require.NoError(t, publish(t, s, m, 10*time.Second))
		got := newConsumer(t, clusterAddr(c), topic).Records(t, 1, 10*time.Second)
		require.Len(t, got, 1)
		require.Equal(t, m.IDString(), got[0].ID)
	})
	t.Run("RetryableWhenTheBrokerRefuses", func(t *testing.T) {
		t.Parallel()
		// Auto-creation off on the broker: the topic may yet be created
		// by an operator, and the sink asked for creation, so the
		// unknown topic is not taken as final.
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		s := newSink(t, "kafka://"+clusterAddr(c)+"?create_topics=true&topic="+newTopic("refused"), nil)
		err = publish(t, s, sinktest.NewMessage("a"), 10*time.Second)
		require.Error(t, err)
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
		require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	})
	t.Run("PermanentWhenNotAsked", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t) // would create it, but the sink does not ask
		topic := newTopic("missing")
		s := newSink(t, "kafka://"+clusterAddr(c)+"?topic="+topic, nil)
		err := publish(t, s, sinktest.NewMessage("a"), 10*time.Second)
		require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
		require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
		require.Contains(t, err.Error(), "create_topics=true")
	})
}

func TestMessageTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	t.Run("RefusedByTheClient", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, kfake.SeedTopics(1, "big"))
		s := newSink(t, "kafka://"+clusterAddr(c)+"?topic=big", nil)
		m := sinktest.NewMessage("a")
		m.Payload = randomJSON(t, 2<<20) // over the 1 MiB batch limit
		err := publish(t, s, m, 10*time.Second)
		require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
		require.ErrorIs(t, err, kerr.MessageTooLarge)
	})
	t.Run("RefusedByTheBroker", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, kfake.SeedTopics(1, "big"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
		s := newSink(t, "kafka://"+clusterAddr(c)+"?topic=big", nil)
		m := sinktest.NewMessage("a")
		m.Payload = randomJSON(t, 8<<10) // incompressible, so still too large once compressed
		err := publish(t, s, m, 10*time.Second)
		require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
		require.ErrorIs(t, err, kerr.MessageTooLarge)
	})
}

// randomJSON returns a JSON string of about n incompressible bytes.
func randomJSON(t testing.TB, n int) []byte {
	b := make([]byte, n*3/4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return []byte(`"` + base64.StdEncoding.EncodeToString(b) + `"`)
}

func TestAuthorizationFailuresAreUnavailable(t *testing.T) {
	t.Parallel()
	acl := func(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	c := newCluster(t,
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "reader", "pw", acl(kmsg.ACLResourceTypeTopic, "locked", kmsg.ACLOperationRead)),
		kfake.User("PLAIN", "idem", "pw",
			acl(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite),
			acl(kmsg.ACLResourceTypeTopic, "locked", kmsg.ACLOperationRead),
			acl(kmsg.ACLResourceTypeTopic, "locked", kmsg.ACLOperationDescribe)),
		kfake.SeedTopics(1, "locked"))
	for _, tt := range []struct {
		user string
		want error
	}{
		{"reader", kerr.ClusterAuthorizationFailed}, // no idempotent write
		{"idem", kerr.TopicAuthorizationFailed},     // no write on the topic
	} {
		t.Run(tt.user, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, "kafka://"+tt.user+":pw@"+clusterAddr(c)+"?sasl=plain&topic=locked", nil)
			// A request that fails at the connection (the client retries
			// it unseen) can keep the answer past one publish's context:
			// that publish is retryable, and a later one gets the refusal.
			var err error
			for range 3 {
				if err = publish(t, s, sinktest.NewMessage("a"), 10*time.Second); !errors.Is(err, context.DeadlineExceeded) {
					break
				}
			}
			require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
			require.ErrorIs(t, err, tt.want)
		})
	}
	t.Run("admin", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, "kafka://admin:admin@"+clusterAddr(c)+"?sasl=plain&topic=locked", nil)
		require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))
	})
}

func TestSASLMechanisms(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "p", "pw-p"),
		kfake.Superuser("SCRAM-SHA-256", "s256", "pw/256"),
		kfake.Superuser("SCRAM-SHA-512", "s512", "pw@512"),
		kfake.SeedTopics(1, "t"))
	// Each user exists for one mechanism only, so a publish succeeds only if
	// the sink used that mechanism.
	for _, tt := range []struct{ name, userinfo, sasl string }{
		{"Plain", "p:pw-p", "plain"},
		{"ScramSHA256", "s256:pw%2F256", "scram-sha-256"},
		{"ScramSHA512", "s512:pw%40512", "SCRAM-SHA-512"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, "kafka://"+tt.userinfo+"@"+clusterAddr(c)+"?sasl="+tt.sasl+"&topic=t", nil)
			require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))
		})
	}
}

func TestSASLAuthenticationFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "right"), kfake.SeedTopics(1, "t"))
	// A real broker answers bad credentials with SASL_AUTHENTICATION_FAILED
	// before closing the connection; kfake only closes it, so answer as
	// Kafka does.
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: Invalid username or password"
		resp.ErrorMessage = &msg
		return resp, nil, true
	})
	s := newSink(t, "kafka://u:wrong@"+clusterAddr(c)+"?sasl=plain&topic=t", nil)
	start := time.Now()
	err := publish(t, s, sinktest.NewMessage("a"), 20*time.Second)
	require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
	require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
	require.NotContains(t, err.Error(), "wrong")
	require.Less(t, time.Since(start), 10*time.Second, "an authentication failure should not wait out the context")
}

func TestBrokerErrorClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    *kerr.Error
		always bool // answer every produce with err, not only the first
		want   string
	}{
		{"InvalidRecord", kerr.InvalidRecord, true, "permanent"},
		{"PolicyViolation", kerr.PolicyViolation, true, "permanent"},
		{"InvalidTopic", kerr.InvalidTopicException, true, "permanent"},
		{"TopicAuthorization", kerr.TopicAuthorizationFailed, true, "unavailable"},
		{"RetriableOnceIsRetriedByTheClient", kerr.NotEnoughReplicas, false, "ok"},
		{"RetriableAlwaysRunsOutTheContext", kerr.NotEnoughReplicas, true, "retryable"},
		{"UnknownNonRetriableIsRetryable", kerr.InvalidTimestamp, true, "retryable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kfake.SeedTopics(1, "t"))
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				if tt.always {
					c.KeepControl()
				}
				return produceError(req.(*kmsg.ProduceRequest), tt.err.Code), nil, true
			})
			s := newSink(t, "kafka://"+clusterAddr(c)+"?topic=t", nil)
			err := publish(t, s, sinktest.NewMessage("a"), 4*time.Second)
			switch tt.want {
			case "ok":
				require.NoError(t, err)
			case "permanent":
				require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
				require.ErrorIs(t, err, tt.err)
			case "unavailable":
				require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
				require.ErrorIs(t, err, tt.err)
			case "retryable":
				require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
			}
		})
	}
}

// produceError answers req with code for every partition in it.
func produceError(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		err          error
		createTopics bool
		want         string
	}{
		{"Canceled", context.Canceled, false, "retryable"},
		{"DeadlineExceeded", context.DeadlineExceeded, false, "retryable"},
		{"ClientClosed", kgo.ErrClientClosed, false, "retryable"},
		{"RecordTimeout", kgo.ErrRecordTimeout, false, "retryable"},
		{"RecordRetries", kgo.ErrRecordRetries, false, "retryable"},
		{"ConnectionLost", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, false, "retryable"},
		{"EOF", io.EOF, false, "retryable"},
		{"NotLeader", kerr.NotLeaderForPartition, false, "retryable"},
		{"RequestTimedOut", kerr.RequestTimedOut, false, "retryable"},
		{"CorruptMessage", kerr.CorruptMessage, false, "retryable"},
		{"UnknownBrokerError", kerr.InvalidTimestamp, false, "retryable"},
		{"UnknownTopic", kerr.UnknownTopicOrPartition, false, "permanent"},
		{"UnknownTopicID", kerr.UnknownTopicID, false, "permanent"},
		{"UnknownTopicWhileCreating", kerr.UnknownTopicOrPartition, true, "retryable"},
		{"WrappedTooLarge", fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), false, "permanent"},
		{"RecordListTooLarge", kerr.RecordListTooLarge, false, "permanent"},
		{"InvalidTopic", kerr.InvalidTopicException, false, "permanent"},
		{"InvalidRecord", kerr.InvalidRecord, false, "permanent"},
		{"TopicAuthorization", kerr.TopicAuthorizationFailed, false, "unavailable"},
		{"ClusterAuthorization", kerr.ClusterAuthorizationFailed, false, "unavailable"},
		{"SASLFailed", kerr.SaslAuthenticationFailed, false, "unavailable"},
		{"UnsupportedSASL", kerr.UnsupportedSaslMechanism, false, "unavailable"},
		{"UntrustedCertificate", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := kafkasink.Classify(tt.createTopics, tt.err)
			require.ErrorIs(t, got, tt.err)
			require.Equal(t, tt.want == "permanent", outbox.IsPermanent(got), "%v", got)
			require.Equal(t, tt.want == "unavailable", outbox.IsUnavailable(got), "%v", got)
			require.Equal(t, tt.want == "retryable", outbox.IsRetryable(got), "%v", got)
		})
	}
}

// freePort returns a port nothing listens on (for now).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

func TestBrokerDownAtNewThenUp(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	topic := newTopic("late")
	start := time.Now()
	s := newSink(t, "kafka://"+addr+"?create_topics=true&topic="+topic, nil)
	require.Less(t, time.Since(start), time.Second, "New must not wait for the broker")

	early := sinktest.NewMessage("a")
	start = time.Now()
	err := publish(t, s, early, 500*time.Millisecond)
	require.True(t, outbox.IsRetryable(err), "want retryable while down, got %v", err)
	require.Less(t, time.Since(start), 2*time.Second)

	newCluster(t, kfake.Ports(port))
	late := sinktest.NewMessage("a")
	publishUntilAcked(t, s, late, 30*time.Second)

	// Same key, same partition, produce order: had the early record been
	// kept and sent once the broker came up, it would sit before the late
	// one. Its context ended before it was ever written, so it was dropped.
	got := newConsumer(t, addr, topic).Records(t, 1, 10*time.Second)
	require.NotEmpty(t, got)
	require.Equal(t, late.IDString(), got[0].ID)
	for _, r := range got {
		require.NotEqual(t, early.IDString(), r.ID, "a record whose publish gave up landed later")
	}
}

func TestTimeoutBoundsARecordWithoutDeadline(t *testing.T) {
	t.Parallel()
	s := newSink(t, "kafka://127.0.0.1:"+strconv.Itoa(freePort(t))+"?timeout=1s&topic=t", nil)
	start := time.Now()
	err := s.Publish(context.Background(), sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.ErrorIs(t, err, kgo.ErrRecordTimeout)
	require.Less(t, time.Since(start), 6*time.Second)
}

func TestPublishAfterCloseIsRetryable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "t"))
	s, err := kafkasink.New("kafka://"+clusterAddr(c)+"?topic=t", nil)
	require.NoError(t, err)
	require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))
	require.NoError(t, s.Close())
	err = publish(t, s, sinktest.NewMessage("a"), 5*time.Second)
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.ErrorIs(t, err, kgo.ErrClientClosed)
}

func TestPing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := newSink(t, "kafka://"+clusterAddr(c), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Ping(ctx))

	down := newSink(t, "kafka://127.0.0.1:"+strconv.Itoa(freePort(t)), nil)
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.Error(t, down.Ping(ctx))
}

// slowConn delays every read, as a distant broker would.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(c.delay) // simulated network latency, not a wait for a condition
	return c.Conn.Read(p)
}

func TestManyPublishesInFlight(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic("flight")
	createTopic(t, c, topic, 4)
	const rtt = 25 * time.Millisecond
	d := &net.Dialer{}
	s := newSink(t, "kafka://"+clusterAddr(c)+"?topic="+topic, &kafkasink.Options{
		Dialer: func(ctx context.Context, network, address string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, address)
			if err != nil {
				return nil, err
			}
			return slowConn{Conn: conn, delay: rtt}, nil
		},
	})
	require.NoError(t, publish(t, s, sinktest.NewMessage("warm-up"), 10*time.Second))

	var produces atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		produces.Add(1)
		return nil, nil, false
	})
	const n = 400
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := publish(t, s, sinktest.NewMessage(fmt.Sprintf("agg-%d", i%50)), 20*time.Second); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d concurrent publishes over a %s round trip: %s (%.0f msgs/s)", n, rtt, elapsed, n/elapsed.Seconds())
	// A sink that waits for each publish's round trip before sending the
	// next sends one Produce request per message; counting requests rather
	// than timing them keeps the check true on a loaded machine.
	t.Logf("%d Produce requests", produces.Load())
	require.Less(t, produces.Load(), int64(n/5), "publishes were not batched into shared requests")
	require.Len(t, newConsumer(t, clusterAddr(c), topic).Records(t, n+1, 20*time.Second), n+1)
}

func TestLoggerGetsClientLogs(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "t"))
	var buf testio.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newSink(t, "kafka://u:hunter2@"+clusterAddr(c)+"?sasl=plain&topic=t", &kafkasink.Options{Logger: logger})
	_ = publish(t, s, sinktest.NewMessage("a"), 300*time.Millisecond)
	out := buf.String()
	require.Contains(t, out, "kafkasink: ")
	require.NotContains(t, out, "hunter2")
}

func TestOutageLeavesNoPileOfRetries(t *testing.T) {
	t.Parallel()
	// During an outage every retry of a message produces a new record. A
	// record that was never written when its publish gave up must be
	// dropped, not kept behind the stuck in-flight batch and delivered with
	// the others once the broker is back.
	c := newCluster(t)
	topic := newTopic("outage")
	createTopic(t, c, topic, 1)
	p := sinktest.NewProxy(t, clusterAddr(c))
	s := newSink(t, "kafka://"+p.Addr()+"?topic="+topic, &kafkasink.Options{Dialer: viaAddr(p.Addr())})
	first := sinktest.NewMessage("a")
	require.NoError(t, publish(t, s, first, 10*time.Second))

	p.Cut()
	m := sinktest.NewMessage("a")
	for range 4 {
		err := publish(t, s, m, 700*time.Millisecond)
		require.True(t, outbox.IsRetryable(err), "want retryable while down, got %v", err)
	}
	p.Restore()
	publishUntilAcked(t, s, m, 30*time.Second)
	after := sinktest.NewMessage("a")
	require.NoError(t, publish(t, s, after, 10*time.Second))

	got := newConsumer(t, clusterAddr(c), topic).Records(t, 3, 10*time.Second)
	ids := make([]string, len(got))
	for i, r := range got {
		ids[i] = r.ID
	}
	require.Equal(t, []string{first.IDString(), m.IDString(), after.IDString()}, ids)
}

func TestCloseWhilePublishing(t *testing.T) {
	t.Parallel()
	// The client dials once it holds a record; this dialer never connects,
	// so the record stays buffered until Close.
	dialing := make(chan struct{})
	var once sync.Once
	s, err := kafkasink.New("kafka://127.0.0.1:9?topic=t", &kafkasink.Options{
		Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			once.Do(func() { close(dialing) })
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	require.NoError(t, err)
	errs := make(chan error, 1)
	go func() { errs <- s.Publish(context.Background(), sinktest.NewMessage("a")) }()
	<-dialing
	start := time.Now()
	require.NoError(t, s.Close())
	err = <-errs
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.ErrorIs(t, err, kgo.ErrClientClosed)
	require.Less(t, time.Since(start), 2*time.Second)
}
