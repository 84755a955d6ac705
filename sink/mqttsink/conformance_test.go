package mqttsink_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/mqttsink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// upstream is the MQTT 5 broker the tests use: OUTBOX_TEST_MQTT
// (host:port), else the machine's local Mosquitto.
var upstream = func() string {
	if a := os.Getenv("OUTBOX_TEST_MQTT"); a != "" {
		return a
	}
	return "127.0.0.1:1883"
}()

var seq atomic.Int64

// newTopicRoot returns a topic prefix no other test (or earlier run) uses.
func newTopicRoot() string {
	return fmt.Sprintf("mqttsink-test/%d-%d-%d", os.Getpid(), time.Now().UnixNano(), seq.Add(1))
}

// received is one PUBLISH as the subscriber got it.
type received struct {
	Topic   string
	QoS     byte
	Payload []byte
	Props   *paho.PublishProperties
}

// subscriber is a separate client subscribed (QoS 1) to a topic filter on
// the real broker, recording what arrives. The broker must be up: a test
// needing it fails, never skips.
type subscriber struct {
	mu  sync.Mutex
	got []received
	// arrived holds one token once a message arrived since the last
	// wait looked: a signal, not a count.
	arrived chan struct{}
}

func subscribe(t testing.TB, filter string) *subscriber {
	t.Helper()
	return subscribeAt(t, upstream, "", "", filter)
}

// subscribeAt is subscribe on the broker at addr, as user (none if empty).
func subscribeAt(t testing.TB, addr, user, password, filter string) *subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	require.NoError(t, err, "MQTT broker at %s is required for these tests", addr)
	sub := &subscriber{arrived: make(chan struct{}, 1)}
	c := paho.NewClient(paho.ClientConfig{
		Conn:     conn,
		ClientID: fmt.Sprintf("mqttsink-test-sub-%d-%d", os.Getpid(), seq.Add(1)),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				sub.mu.Lock()
				sub.got = append(sub.got, received{
					Topic:   pr.Packet.Topic,
					QoS:     pr.Packet.QoS,
					Payload: append([]byte(nil), pr.Packet.Payload...),
					Props:   pr.Packet.Properties,
				})
				sub.mu.Unlock()
				select {
				case sub.arrived <- struct{}{}:
				default:
				}
				return true, nil
			},
		},
	})
	cp := &paho.Connect{ClientID: c.ClientID(), CleanStart: true, KeepAlive: 30}
	if user != "" {
		cp.Username, cp.UsernameFlag, cp.Password, cp.PasswordFlag = user, true, []byte(password), true
	}
	ca, err := c.Connect(ctx, cp)
	require.NoError(t, err)
	require.Equal(t, byte(0), ca.ReasonCode)
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{ReasonCode: 0}) })
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	require.NoError(t, err)
	require.Equal(t, []byte{1}, sa.Reasons, "subscription granted at QoS 1")
	return sub
}

// wait returns what arrived once there are n messages or timeout passes.
func (s *subscriber) wait(n int, timeout time.Duration) []received {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got := append([]received(nil), s.got...)
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-s.arrived:
		case <-deadline.C:
			s.mu.Lock()
			defer s.mu.Unlock()
			return append([]received(nil), s.got...)
		}
	}
}

// Receive implements [sinktest.Receiver]: the id comes from the Outbox-Id
// user property.
func (s *subscriber) Receive(t *testing.T, n int, timeout time.Duration) []sinktest.Received {
	t.Helper()
	got := s.wait(n, timeout)
	out := make([]sinktest.Received, len(got))
	for i, r := range got {
		out[i] = sinktest.Received{
			ID:      r.Props.User.Get(sinkutil.HeaderID),
			Payload: r.Payload,
			Meta: map[string]string{
				"event_type":     r.Props.User.Get(sinkutil.HeaderEventType),
				"aggregate_type": r.Props.User.Get(sinkutil.HeaderAggregateType),
				"aggregate_id":   r.Props.User.Get(sinkutil.HeaderAggregateID),
				"fencing_token":  r.Props.User.Get(sinkutil.HeaderFencingToken),
				"attempt":        r.Props.User.Get(sinkutil.HeaderAttempt),
				"created_at":     r.Props.User.Get(sinkutil.HeaderCreatedAt),
			},
		}
	}
	return out
}

func sinkURL(addr, topic, extra string) string {
	u := "mqtt://" + addr + "?topic=" + url.QueryEscape(topic)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

// Mosquitto, as configured here (anonymous, no ACL), accepts every
// well-formed PUBLISH, so the suite has no Permanent case: the PUBACK
// mapping is tested on a scripted broker in mqttsink_test.go instead.
func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, sinktest.Harness{
		Upstream: upstream,
		New: func(t *testing.T, addr string) (outbox.Sink, sinktest.Receiver) {
			root := newTopicRoot()
			sub := subscribe(t, root+"/#")
			s, err := mqttsink.New(sinkURL(addr, root+"/{aggregate_type}/{event_type}", ""), nil)
			require.NoError(t, err)
			return s, sub
		},
	})
}
