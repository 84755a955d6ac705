package mqttsink_test

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
	"github.com/outboxd/outbox/sink/mqttsink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func TestNewURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"mqtt://127.0.0.1:1883?client_id=a", "mqtt://127.0.0.1:1883?topic=outbox/{aggregate_type}/{event_type}&client_id=a&keepalive=30s&connect_timeout=10s"},
		{"mqtt://broker?client_id=a", "mqtt://broker:1883?topic=outbox/{aggregate_type}/{event_type}&client_id=a&keepalive=30s&connect_timeout=10s"},
		{"mqtts://broker/?client_id=a", "mqtts://broker:8883?topic=outbox/{aggregate_type}/{event_type}&client_id=a&keepalive=30s&connect_timeout=10s"},
		{"mqtt://[::1]:1884?client_id=a", "mqtt://[::1]:1884?topic=outbox/{aggregate_type}/{event_type}&client_id=a&keepalive=30s&connect_timeout=10s"},
		// A lone user name is often an access token: hidden.
		{"mqtt://TOKEN123@broker?client_id=a", "mqtt://xxxxx@broker:1883?topic=outbox/{aggregate_type}/{event_type}&client_id=a&keepalive=30s&connect_timeout=10s"},
		{
			"mqtts://relay:s3cret@broker:8884?topic=events/{aggregate_type}/{aggregate_id}&client_id=outboxd-1&keepalive=1m&connect_timeout=3s",
			"mqtts://relay:xxxxx@broker:8884?topic=events/{aggregate_type}/{aggregate_id}&client_id=outboxd-1&keepalive=1m0s&connect_timeout=3s",
		},
	} {
		s, err := mqttsink.New(tt.in, nil)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, s.String())
		require.NoError(t, s.Close())
	}

	s, err := mqttsink.New("mqtt://broker", nil)
	require.NoError(t, err)
	require.Regexp(t, `client_id=outboxd-[0-9a-f]{16}&`, s.String(), "a random client id by default")
	require.NoError(t, s.Close())

	for _, tt := range []struct{ in, wantErr string }{
		{"", "no scheme"},
		{"tcp://broker:1883", `unsupported URL scheme "tcp"`},
		{"mqtt://", "no host"},
		{"mqtt://broker:70000", "invalid port"},
		{"mqtt://relay:hunter2@broker:port", "malformed URL"},
		{"mqtt://broker/outbox/x", "unexpected path"},
		{"mqtt://broker?topic=", "must not be empty"},
		{"mqtt://broker?topic=a/{nope}", "unknown placeholder {nope}"},
		{"mqtt://broker?topic=a/%2B/b", "wildcards"},
		{"mqtt://broker?topic=a/%23", "wildcards"},
		{"mqtt://broker?topic=%24SYS/x", "reserved"},
		{"mqtt://broker?client_id=", "client_id"},
		{"mqtt://broker?keepalive=-1s", "keepalive"},
		{"mqtt://broker?keepalive=20h", "keepalive"},
		{"mqtt://broker?connect_timeout=0s", "connect_timeout"},
		{"mqtt://broker?qos=2", `unknown URL parameter "qos" (known: client_id, connect_timeout, keepalive, topic)`},
		{"mqtt://broker?topic=a&topic=b", "given 2 times"},
		{"mqtt://relay:hunter2@broker?bogus=1", "bogus"},
	} {
		s, err := mqttsink.New(tt.in, nil)
		require.Error(t, err, tt.in)
		require.Nil(t, s)
		require.Contains(t, err.Error(), tt.wantErr, tt.in)
		require.NotContains(t, err.Error(), "hunter2", "an error must never show the password")
	}
}

func TestTopicTemplate(t *testing.T) {
	t.Parallel()
	root := newTopicRoot()
	sub := subscribe(t, root+"/#")
	s, err := mqttsink.New(sinkURL(upstream, root+"/{aggregate_type}/{event_type}/{aggregate_id}", ""), nil)
	require.NoError(t, err)
	defer s.Close()

	m := sinktest.NewMessage("a/b+c#d")
	m.AggregateType = "order"
	require.NoError(t, s.Publish(t.Context(), m))
	got := sub.wait(1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, root+"/order/OrderCreated/a_b_c_d", got[0].Topic, "a value is one topic level, wildcards replaced")
	require.Equal(t, "a/b+c#d", got[0].Props.User.Get(sinkutil.HeaderAggregateID), "metadata keeps the value as it is")
}

func TestPublishProperties(t *testing.T) {
	t.Parallel()
	root := newTopicRoot()
	sub := subscribe(t, root+"/#")
	s, err := mqttsink.New(sinkURL(upstream, root+"/{aggregate_type}", ""), nil)
	require.NoError(t, err)
	defer s.Close()

	m := sinktest.NewMessage("Agg 1")
	m.CreatedAt = time.Date(2024, 3, 1, 10, 0, 0, 123456000, time.FixedZone("CET", 3600))
	require.NoError(t, s.Publish(t.Context(), m))
	got := sub.wait(1, 10*time.Second)
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, byte(1), r.QoS)
	require.Equal(t, string(m.Payload), string(r.Payload))
	require.Equal(t, "application/json", r.Props.ContentType)
	require.NotNil(t, r.Props.PayloadFormat)
	require.Equal(t, byte(1), *r.Props.PayloadFormat)
	want := paho.UserProperties{}
	for _, h := range (sinkutil.Reserved{}).Headers(m) {
		want = append(want, paho.UserProperty{Key: h.Key, Value: h.Value})
	}
	require.Equal(t, want, r.Props.User)
	require.Equal(t, "2024-03-01T09:00:00.123456Z", r.Props.User.Get(sinkutil.HeaderCreatedAt))
}

func TestRejectedBeforeSending(t *testing.T) {
	t.Parallel()
	root := newTopicRoot()
	s, err := mqttsink.New(sinkURL(upstream, "{aggregate_type}/"+root, ""), nil)
	require.NoError(t, err)
	defer s.Close()

	m := sinktest.NewMessage("a")
	m.AggregateType = "$SYS"
	err = s.Publish(t.Context(), m)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
	require.Contains(t, err.Error(), "reserved")

	m = sinktest.NewMessage("bad\x00id")
	err = s.Publish(t.Context(), m)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
	require.Contains(t, err.Error(), sinkutil.HeaderAggregateID)

	m = sinktest.NewMessage("a")
	m.EventType = "bad\xffutf8"
	err = s.Publish(t.Context(), m)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
}

func TestClassifyPuback(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code byte
		want string
		name string
	}{
		{0x80, "retryable", "Unspecified error"},
		{0x83, "retryable", "Implementation specific error"},
		{0x87, "unavailable", "Not authorized"},
		{0x90, "permanent", "Topic Name invalid"},
		{0x91, "retryable", "Packet Identifier in use"},
		{0x97, "retryable", "Quota exceeded"},
		{0x99, "permanent", "Payload format invalid"},
		{0xA0, "retryable", "reason code 0xa0"},
	} {
		err := mqttsink.ClassifyPuback(tt.code, "because", "PUBLISH t on h")
		require.Error(t, err)
		require.Equal(t, tt.want == "permanent", outbox.IsPermanent(err), "0x%02X: want %s, got %v", tt.code, tt.want, err)
		require.Equal(t, tt.want == "unavailable", outbox.IsUnavailable(err), "0x%02X: want %s, got %v", tt.code, tt.want, err)
		require.Equal(t, tt.want == "retryable", outbox.IsRetryable(err), "0x%02X: want %s, got %v", tt.code, tt.want, err)
		require.Contains(t, err.Error(), tt.name)
		require.Contains(t, err.Error(), "because")
	}
}

func TestPacketSize(t *testing.T) {
	t.Parallel()
	one := byte(1)
	for _, n := range []int{0, 10, 100, 200, 16000, 16400, 2100000} {
		m := sinktest.NewMessage("agg")
		p := &paho.Publish{
			QoS:     1,
			Topic:   "outbox/order/OrderCreated",
			Payload: bytes.Repeat([]byte("x"), n),
			Properties: &paho.PublishProperties{
				ContentType:   "application/json",
				PayloadFormat: &one,
			},
		}
		for _, h := range (sinkutil.Reserved{}).Headers(m) {
			p.Properties.User = append(p.Properties.User, paho.UserProperty{Key: h.Key, Value: h.Value})
		}
		pb := p.Packet()
		pb.PacketID = 1
		var buf bytes.Buffer
		_, err := pb.WriteTo(&buf)
		require.NoError(t, err)
		require.Equal(t, buf.Len(), mqttsink.PacketSize(p), "payload of %d bytes", n)
	}
}

// fakeBroker speaks just enough MQTT 5 to script a broker's answers:
// CONNACK with a chosen reason code and properties, and a PUBACK reason code
// per topic (or none at all: the PUBLISH is swallowed).
type fakeBroker struct {
	ln      net.Listener
	connack packets.Connack
	// puback returns the reason code for a topic, or -1 to never answer.
	puback func(topic string) int

	mu        sync.Mutex
	conns     []net.Conn
	published chan string
	wg        sync.WaitGroup
}

func newFakeBroker(t *testing.T, connack packets.Connack, puback func(topic string) int) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &fakeBroker{ln: ln, connack: connack, puback: puback, published: make(chan string, 100)}
	b.wg.Go(b.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		b.dropConnections()
		b.wg.Wait()
	})
	return b
}

func (b *fakeBroker) addr() string { return b.ln.Addr().String() }

func (b *fakeBroker) dropConnections() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

func (b *fakeBroker) accept() {
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, conn)
		b.mu.Unlock()
		b.wg.Go(func() { b.serve(conn) })
	}
}

func (b *fakeBroker) serve(conn net.Conn) {
	defer conn.Close()
	for {
		cp, err := packets.ReadPacket(conn)
		if err != nil {
			return
		}
		switch p := cp.Content.(type) {
		case *packets.Connect:
			ack := packets.NewControlPacket(packets.CONNACK)
			ca := b.connack
			if ca.Properties == nil {
				ca.Properties = &packets.Properties{}
			}
			ack.Content = &ca
			if _, err := ack.WriteTo(conn); err != nil || ca.ReasonCode >= 0x80 {
				return
			}
		case *packets.Publish:
			select {
			case b.published <- p.Topic:
			default:
			}
			code := b.puback(p.Topic)
			if code < 0 {
				continue
			}
			ack := packets.NewControlPacket(packets.PUBACK)
			ack.Content = &packets.Puback{PacketID: p.PacketID, ReasonCode: byte(code), Properties: &packets.Properties{ReasonString: "scripted"}}
			if _, err := ack.WriteTo(conn); err != nil {
				return
			}
		case *packets.Pingreq:
			if _, err := packets.NewControlPacket(packets.PINGRESP).WriteTo(conn); err != nil {
				return
			}
		case *packets.Disconnect:
			return
		}
	}
}

// TestPubackOnTheWire runs the reason-code mapping end to end through paho,
// against a broker that answers each topic with a chosen PUBACK.
func TestPubackOnTheWire(t *testing.T) {
	t.Parallel()
	codes := map[string]int{"ok": 0x00, "nosub": 0x10, "deny": 0x87, "badtopic": 0x90, "badpayload": 0x99, "quota": 0x97, "unspecified": 0x80}
	b := newFakeBroker(t, packets.Connack{}, func(topic string) int { return codes[strings.TrimPrefix(topic, "t/")] })
	s, err := mqttsink.New(sinkURL(b.addr(), "t/{event_type}", ""), nil)
	require.NoError(t, err)
	defer s.Close()

	for event, code := range codes {
		m := sinktest.NewMessage("a")
		m.EventType = event
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := s.Publish(ctx, m)
		cancel()
		switch code {
		case 0x00, 0x10:
			require.NoError(t, err, event)
		case 0x87:
			require.True(t, outbox.IsUnavailable(err), "%s: want unavailable, got %v", event, err)
			require.Contains(t, err.Error(), "scripted", "the broker's reason string is kept")
		case 0x90, 0x99:
			require.True(t, outbox.IsPermanent(err), "%s: want permanent, got %v", event, err)
			require.Contains(t, err.Error(), "scripted", "the broker's reason string is kept")
		default:
			require.True(t, outbox.IsRetryable(err), "%s: want retryable, got %v", event, err)
		}
	}
}

// TestConnectionLostBeforePuback checks that a publish waiting for a PUBACK
// on a connection that drops fails at once as retryable instead of waiting
// for its deadline, and that the sink reconnects.
func TestConnectionLostBeforePuback(t *testing.T) {
	t.Parallel()
	answer := make(chan int, 1)
	answer <- -1 // swallow the first PUBLISH
	b := newFakeBroker(t, packets.Connack{}, func(string) int {
		select {
		case c := <-answer:
			return c
		default:
			return 0
		}
	})
	s, err := mqttsink.New(sinkURL(b.addr(), "t/{event_type}", ""), nil)
	require.NoError(t, err)
	defer s.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Publish(ctx, sinktest.NewMessage("a")) }()
	select {
	case <-b.published:
	case <-time.After(10 * time.Second):
		t.Fatal("the PUBLISH never reached the broker")
	}
	start := time.Now()
	b.dropConnections()
	select {
	case err := <-done:
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
		require.Contains(t, err.Error(), "may have been delivered")
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(15 * time.Second):
		t.Fatal("publish kept waiting for a PUBACK on a lost connection")
	}

	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		return s.Publish(ctx, sinktest.NewMessage("a")) == nil
	}, 15*time.Second, 50*time.Millisecond, "the sink must reconnect")
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		code    byte
		refused bool
	}{
		{"BadUserNameOrPassword", 0x86, true},
		{"NotAuthorized", 0x87, true},
		{"ClientIdentifierNotValid", 0x85, true},
		{"ServerUnavailable", 0x88, false},
		{"ServerBusy", 0x89, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newFakeBroker(t, packets.Connack{ReasonCode: tt.code}, func(string) int { return 0 })
			s, err := mqttsink.New("mqtt://relay:hunter2@"+b.addr()+"?topic=t", nil)
			require.NoError(t, err)
			defer s.Close()
			// The first publish may come before the first refusal; the
			// dispatcher would retry, and so does the test.
			var perr error
			require.Eventually(t, func() bool {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				perr = s.Publish(ctx, sinktest.NewMessage("a"))
				return outbox.IsUnavailable(perr) || !tt.refused && strings.Contains(fmtErr(perr), "last attempt")
			}, 10*time.Second, 10*time.Millisecond)
			require.Error(t, perr)
			require.NotContains(t, perr.Error(), "hunter2")
			require.False(t, outbox.IsPermanent(perr), "a refused connection never spends the message: %v", perr)
			if !tt.refused {
				require.True(t, outbox.IsRetryable(perr), "want retryable, got %v", perr)
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestPacketTooLargeForBroker(t *testing.T) {
	t.Parallel()
	limit := uint32(1024)
	b := newFakeBroker(t, packets.Connack{Properties: &packets.Properties{MaximumPacketSize: &limit}}, func(string) int { return 0 })
	s, err := mqttsink.New(sinkURL(b.addr(), "t", ""), nil)
	require.NoError(t, err)
	defer s.Close()

	require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
	m := sinktest.NewMessage("a")
	m.Payload = []byte(`"` + strings.Repeat("x", 2000) + `"`)
	err = s.Publish(t.Context(), m)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
	require.Contains(t, err.Error(), "maximum packet size of 1024")
}

func TestBrokerDownAtNew(t *testing.T) {
	t.Parallel()

	t.Run("NothingListening", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		s, err := mqttsink.New(sinkURL(testio.FreeAddr(t), "t", ""), nil)
		require.NoError(t, err, "New must not need the broker")
		require.Less(t, time.Since(start), time.Second, "New must not wait for the broker")
		defer s.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err = s.Publish(ctx, sinktest.NewMessage("a"))
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
		require.Contains(t, err.Error(), "connection refused", "the error tells why")
	})

	t.Run("ComesUpLater", func(t *testing.T) {
		t.Parallel()
		root := newTopicRoot()
		sub := subscribe(t, root)
		p := sinktest.NewProxy(t, upstream)
		p.Cut()
		s, err := mqttsink.New(sinkURL(p.Addr(), root, ""), nil)
		require.NoError(t, err)
		defer s.Close()
		m := sinktest.NewMessage("a")
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		err = s.Publish(ctx, m)
		cancel()
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)

		p.Restore()
		ctx, cancel = context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		require.NoError(t, s.Publish(ctx, m), "a publish waits for the reconnection within its context")
		require.Len(t, sub.wait(1, 10*time.Second), 1)
	})
}

func TestManyInFlight(t *testing.T) {
	t.Parallel()
	root := newTopicRoot()
	sub := subscribe(t, root)
	s, err := mqttsink.New(sinkURL(upstream, root, ""), nil)
	require.NoError(t, err)
	defer s.Close()

	const workers, per = 64, 20
	elapsed := sinktest.PublishConcurrently(t, s, workers, per, func(int, int) *outbox.Message { return sinktest.NewMessage("a") })
	got := sub.wait(workers*per, 20*time.Second)
	require.Len(t, got, workers*per)
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.Props.User.Get(sinkutil.HeaderID)] = true
	}
	require.Len(t, ids, workers*per, "every message once")
	t.Logf("%d publishes from %d goroutines in %s (%.0f msgs/s)", workers*per, workers, elapsed, float64(workers*per)/elapsed.Seconds())
	require.Less(t, elapsed, 15*time.Second)
}

// BenchmarkPublish measures parallel QoS 1 publishes (each waiting for its
// PUBACK) to the real broker from 64 goroutines (dispatcher workers).
func BenchmarkPublish(b *testing.B) {
	s, err := mqttsink.New(sinkURL(upstream, newTopicRoot(), ""), nil)
	require.NoError(b, err)
	defer s.Close()
	// Fail rather than measure connection waits when the broker is missing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	require.NoError(b, s.Publish(ctx, sinktest.NewMessage("a")))
	cancel()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Publish(context.Background(), sinktest.NewMessage("a")); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
