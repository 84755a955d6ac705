package natssink_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, url string
		mention   string // "" = valid
	}{
		{name: "Minimal", url: "nats://127.0.0.1:4222"},
		{name: "DefaultPort", url: "nats://localhost?subject=a.{event_type}"},
		{name: "TLS", url: "tls://broker:4443?subject=a.b"},
		{name: "NatsPlusTLS", url: "nats+tls://broker?subject=a.b"},
		{name: "Cluster", url: "nats://h1:4222,h2:4223?subject=a.b"},
		{name: "ClusterDefaultPorts", url: "nats://h1,h2"},
		{name: "IPv6", url: "nats://[::1]:4222?subject=a.b"},
		{name: "AllOptions", url: "nats://u:p@h:4222/?subject=x.{aggregate_type}.{event_type}.{aggregate_id}&create_stream=OUTBOX&duplicate_window=1h&timeout=5s&connect_timeout=1s&reconnect_wait=250ms&max_pending=10&name=relay-1"},
		{name: "Token", url: "nats://s3cret-token@h:4222"},
		{name: "Creds", url: "nats://h:4222?creds=/etc/nats/outbox.creds"},
		{name: "PlaceholderInsideToken", url: "nats://h?subject=ev.{aggregate_type}-v1.x{event_type}"},

		{name: "NoScheme", url: "127.0.0.1:4222", mention: "scheme"},
		{name: "WrongScheme", url: "http://h:4222", mention: `"http"`},
		{name: "Opaque", url: "nats:h", mention: "scheme"},
		{name: "NoHost", url: "nats://?subject=a", mention: "no host"},
		{name: "EmptyClusterHost", url: "nats://h1:4222,,h2:4222", mention: "empty host"},
		{name: "BadPort", url: "nats://h:99999", mention: "port"},
		{name: "Path", url: "nats://h:4222/outbox.orders", mention: "?subject="},
		{name: "Fragment", url: "nats://h:4222#x", mention: "fragment"},
		{name: "UnknownParam", url: "nats://h?subjct=a", mention: `"subjct"`},
		{name: "RepeatedParam", url: "nats://h?subject=a&subject=b", mention: "2 times"},
		{name: "EmptySubject", url: "nats://h?subject=", mention: "empty"},
		{name: "UnknownPlaceholder", url: "nats://h?subject=a.{nope}", mention: "{nope}"},
		{name: "EmptyToken", url: "nats://h?subject=a..b", mention: "empty token"},
		{name: "TrailingDot", url: "nats://h?subject=a.", mention: "empty token"},
		{name: "Wildcard", url: "nats://h?subject=a.*", mention: "wildcards"},
		{name: "FullWildcard", url: "nats://h?subject=a.>", mention: "wildcards"},
		{name: "SpaceInSubject", url: "nats://h?subject=a%20b", mention: "spaces"},
		{name: "BadStreamName", url: "nats://h?create_stream=a.b", mention: "create_stream"},
		{name: "EmptyStreamName", url: "nats://h?create_stream=", mention: "create_stream"},
		{name: "WindowWithoutStream", url: "nats://h?duplicate_window=1h", mention: "create_stream"},
		{name: "TinyWindow", url: "nats://h?create_stream=S&duplicate_window=10ms", mention: "at least 1s"},
		{name: "BadTimeout", url: "nats://h?timeout=soon", mention: "timeout"},
		{name: "ZeroTimeout", url: "nats://h?timeout=0s", mention: "positive"},
		{name: "NegativeConnectTimeout", url: "nats://h?connect_timeout=-1s", mention: "connect_timeout"},
		{name: "BadMaxPending", url: "nats://h?max_pending=0", mention: "max_pending"},
		{name: "EmptyCreds", url: "nats://h?creds=", mention: "creds"},
		{name: "CredsAndUser", url: "nats://u:p@h?creds=/x", mention: "exclusive"},
		{name: "PasswordWithoutUser", url: "nats://:p@h", mention: "no user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := natssink.CheckURL(tt.url)
			if tt.mention == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.mention)
			require.True(t, strings.HasPrefix(err.Error(), "natssink: "), err.Error())
		})
	}
}

func TestURLErrorsHidePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"nats://alice:hunter2@h:4222?subjct=x",
		"nats://alice:hunter2@h:4222/path",
		"nats://alice:hunter2@h:bad",
		"nats://alice:hunter2@h:4222?timeout=x%zz",
		"nats://alice:hunter2@h\x7f:4222",
	} {
		_, err := natssink.New(u, nil)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "hunter2", u)
	}
}

func TestTLSConfigNeedsTLSScheme(t *testing.T) {
	t.Parallel()
	_, err := natssink.New("nats://127.0.0.1:4222", &natssink.Options{TLSConfig: tlsConfigStub()})
	require.ErrorContains(t, err, "tls://")
}

func TestStreamSubjectCoversTemplate(t *testing.T) {
	t.Parallel()
	for tmpl, want := range map[string]string{
		"outbox.{aggregate_type}.{event_type}":  "outbox.*.*",
		"fixed.subject":                         "fixed.subject",
		"ev.{aggregate_type}-v1.{aggregate_id}": "ev.*.*",
		"{event_type}":                          "*",
	} {
		got, err := natssink.StreamSubject("nats://h?subject=" + tmpl)
		require.NoError(t, err)
		require.Equal(t, want, got, tmpl)
	}
}

func TestSanitizeAndEncode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a_b_c__d", natssink.SanitizeToken("a.b c*>d"))
	require.Equal(t, "_", natssink.SanitizeToken(""))
	require.Equal(t, "Zoë_x", natssink.SanitizeToken("Zoë\tx"))
	require.Equal(t, "OrderCreated", natssink.SanitizeToken("OrderCreated"))

	require.Equal(t, "OrderCreated", natssink.EncodeHeaderValue("OrderCreated"))
	require.Equal(t, "Agg%2042/%C3%BC", natssink.EncodeHeaderValue("Agg 42/ü"))
	require.Equal(t, "a%0D%0Ab%25%22", natssink.EncodeHeaderValue("a\r\nb%\""))
}

// TestTemplateExpandsIntoSubjects checks every placeholder lands in the
// subject, sanitised to one token, while the headers keep the exact values.
func TestTemplateExpandsIntoSubjects(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{aggregate_type}.{event_type}.id-{aggregate_id}", nil)
	m := sinktest.NewMessage("a.b c*>\r\n%")
	m.AggregateType, m.EventType = "Order", ""
	require.NoError(t, s.Publish(t.Context(), m))

	got := newReceiver(js, stream).receiveRaw(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, prefix+".Order._.id-a_b_c____%", got[0].Subject)
	rec := toReceived(t, got[0])
	require.Equal(t, "a.b c*>\r\n%", rec.Meta["aggregate_id"])
	require.Empty(t, rec.Meta["event_type"])
	require.Equal(t, m.IDString(), rec.Meta["id"])
	require.Equal(t, m.CreatedAt.Format(time.RFC3339Nano), rec.Meta["created_at"])
}

// TestDuplicateIsSuccessAndStoredOnce republishes the same id, from the same
// sink and from a second one (another outboxd), within the dedupe window.
func TestDuplicateIsSuccessAndStoredOnce(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	u := "nats://" + upstream + "?subject=" + prefix + ".{event_type}"
	s1, s2 := newSink(t, u, nil), newSink(t, u, nil)
	m := sinktest.NewMessage("a")
	require.NoError(t, s1.Publish(t.Context(), m))
	again := *m
	again.Attempt, again.FencingToken = 3, 8
	require.NoError(t, s1.Publish(t.Context(), &again))
	require.NoError(t, s2.Publish(t.Context(), &again))
	require.NoError(t, s1.Publish(t.Context(), sinktest.NewMessage("b")))

	got := newReceiver(js, stream).Receive(t, 3, time.Second)
	require.Len(t, got, 2, "the duplicate must be stored once")
	require.Equal(t, m.IDString(), got[0].ID)
	require.Equal(t, "2", got[0].Meta["attempt"], "the first copy is the one kept")
	require.EqualValues(t, 2, streamMsgs(t, js, stream))
}

// TestReplayIsNotADuplicate replays a delivered message within the dedupe
// window: the stream keeps the replay (its own Nats-Msg-Id), and still drops
// a redelivery of the replay.
func TestReplayIsNotADuplicate(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{event_type}", nil)
	m := sinktest.NewMessage("a")
	require.NoError(t, s.Publish(t.Context(), m))
	replay := *m
	replay.Headers = map[string]string{outbox.ReplayHeader: "fix-1"}
	require.NoError(t, s.Publish(t.Context(), &replay))
	require.NoError(t, s.Publish(t.Context(), &replay))

	raw := newReceiver(js, stream).receiveRaw(t, 3, time.Second)
	require.Len(t, raw, 2, "the replay is stored once, beside the original")
	require.Equal(t, m.IDString(), raw[1].Header.Get("Outbox-Id"), "a replay keeps its id")
	require.Equal(t, "fix-1", raw[1].Header.Get("Outbox-Replay"))
	require.Equal(t, m.IDString()+"/replay/fix-1", raw[1].Header.Get(jetstream.MsgIDHeader))
}

// TestProducerNatsHeadersAreLeftOut: the server's Nats-* names stay the
// sink's own (a producer's Nats-Msg-Id would forge the dedupe key); other
// producer headers pass.
func TestProducerNatsHeadersAreLeftOut(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{event_type}", nil)
	m := sinktest.NewMessage("a")
	m.Headers = map[string]string{"nats-msg-id": "forged", "Nats-Expected-Stream": "other", "traceparent": "00-1"}
	require.NoError(t, s.Publish(t.Context(), m))

	raw := newReceiver(js, stream).receiveRaw(t, 1, time.Second)
	require.Len(t, raw, 1)
	require.Equal(t, []string{m.IDString()}, raw[0].Header.Values(jetstream.MsgIDHeader))
	require.Empty(t, raw[0].Header.Values("Nats-Expected-Stream"))
	require.Equal(t, "00-1", raw[0].Header.Get("traceparent"))
}

func TestNoStreamIsPermanent(t *testing.T) {
	t.Parallel()
	s := newSink(t, "nats://"+upstream+"?subject="+uniqueName("nostream")+".x", nil)
	err := s.Publish(t.Context(), sinktest.NewMessage("a"))
	require.True(t, outbox.IsPermanent(err), "got %v", err)
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
}

func TestMessageTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)

	t.Run("Stream", func(t *testing.T) {
		t.Parallel()
		prefix, _ := newStream(t, js, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 512 })
		s := newSink(t, "nats://"+upstream+"?subject="+prefix+".x", nil)
		m := sinktest.NewMessage("a")
		m.Payload = []byte(`"` + strings.Repeat("x", 1024) + `"`)
		err := s.Publish(t.Context(), m)
		require.True(t, outbox.IsPermanent(err), "got %v", err)
		require.ErrorIs(t, err, jetstream.ErrStreamMessageExceedsMaximum)
	})
	t.Run("Server", func(t *testing.T) {
		t.Parallel()
		prefix, _ := newStream(t, js, nil)
		s := newSink(t, "nats://"+upstream+"?subject="+prefix+".x", nil)
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a"))) // learn max_payload
		m := sinktest.NewMessage("a")
		m.Payload = []byte(`"` + strings.Repeat("x", 2<<20) + `"`)
		err := s.Publish(t.Context(), m)
		require.True(t, outbox.IsPermanent(err), "got %v", err)
		require.ErrorIs(t, err, nats.ErrMaxPayload)
	})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: "x"})
	}
	permanent := []error{
		jetstream.ErrNoStreamResponse,
		nats.ErrNoResponders,
		jetstream.ErrStreamNotFound,
		api(jetstream.JSErrCodeStreamNotFound),
		api(jetstream.JSErrCodeStreamMessageExceedsMaximum),
		api(jetstream.JSErrCodeStreamWrongLastSequence),
		api(jetstream.JSErrCodeStreamWrongLastSequenceConstant),
		api(10060), // expected stream mismatch
		api(jetstream.JSErrCodeJetStreamNotEnabledForAccount),
		nats.ErrMaxPayload,
		nats.ErrBadSubject,
		nats.ErrHeadersNotSupported,
	}
	unavailable := []error{
		fmt.Errorf("%w: Permissions Violation for Publish to \"x\"", nats.ErrPermissionViolation),
		nats.ErrAuthorization,
		nats.ErrAuthExpired,
		nats.ErrAuthRevoked,
		nats.ErrAccountAuthExpired,
		x509.UnknownAuthorityError{},
		&tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}},
	}
	retryable := []error{
		context.Canceled,
		context.DeadlineExceeded,
		fmt.Errorf("no PubAck: %w", context.DeadlineExceeded),
		nats.ErrTimeout,
		jetstream.ErrAsyncPublishTimeout,
		jetstream.ErrTooManyStalledMsgs,
		nats.ErrDisconnected,
		nats.ErrConnectionClosed,
		nats.ErrConnectionReconnecting,
		nats.ErrReconnectBufExceeded,
		nats.ErrNoServers,
		api(10077), // store failed
		&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled},
		errors.New("something new"),
	}
	for _, err := range permanent {
		got := natssink.Classify(err, false)
		require.True(t, outbox.IsPermanent(got), "%v: got %v", err, got)
		require.ErrorIs(t, got, err)
	}
	for _, err := range unavailable {
		got := natssink.Classify(err, false)
		require.True(t, outbox.IsUnavailable(got), "%v: got %v", err, got)
		require.ErrorIs(t, got, err)
	}
	for _, err := range retryable {
		got := natssink.Classify(err, false)
		require.True(t, outbox.IsRetryable(got), "%v: got %v", err, got)
		require.ErrorIs(t, got, err)
	}
	// With create_stream, a missing stream is the sink's job to fix.
	for _, err := range []error{jetstream.ErrNoStreamResponse, nats.ErrNoResponders, jetstream.ErrStreamNotFound} {
		got := natssink.Classify(err, true)
		require.True(t, outbox.IsRetryable(got), "%v: got %v", err, got)
	}
}

func TestCreateStream(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)

	t.Run("CreatesMissingStream", func(t *testing.T) {
		t.Parallel()
		prefix, name := uniqueName("p"), uniqueName("S")
		deleteAtCleanup(t, js, name)
		s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{aggregate_type}.{event_type}&create_stream="+name+"&duplicate_window=1h", nil)
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
		st, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, []string{prefix + ".*.*"}, st.CachedInfo().Config.Subjects)
		require.Equal(t, time.Hour, st.CachedInfo().Config.Duplicates)
		require.EqualValues(t, 1, st.CachedInfo().State.Msgs)
	})

	t.Run("AddsSubjectToExistingStream", func(t *testing.T) {
		t.Parallel()
		other, name := newStream(t, js, nil)
		prefix := uniqueName("p")
		s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{event_type}&create_stream="+name, nil)
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
		st, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, []string{other + ".>", prefix + ".*"}, st.CachedInfo().Config.Subjects)
		require.Equal(t, jetstream.MemoryStorage, st.CachedInfo().Config.Storage, "the rest of the config is kept")
	})

	t.Run("LeavesCoveringStreamAlone", func(t *testing.T) {
		t.Parallel()
		prefix, name := newStream(t, js, nil)
		s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{aggregate_type}.{event_type}&create_stream="+name, nil)
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
		st, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, []string{prefix + ".>"}, st.CachedInfo().Config.Subjects)
	})

	t.Run("RecreatesDeletedStream", func(t *testing.T) {
		t.Parallel()
		prefix, name := uniqueName("p"), uniqueName("S")
		deleteAtCleanup(t, js, name)
		s := newSink(t, "nats://"+upstream+"?subject="+prefix+".x&create_stream="+name, nil)
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
		require.NoError(t, js.DeleteStream(t.Context(), name))
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")), "the sink recreates the stream it was told to keep")
		require.EqualValues(t, 1, streamMsgs(t, js, name))
	})
}

// TestBrokerDownAtNew builds the sink while the broker is unreachable: New
// succeeds, publishes fail as retryable, and the sink connects once the
// broker is back.
func TestBrokerDownAtNew(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	p := sinktest.NewProxy(t, upstream)
	p.Cut()
	start := time.Now()
	s := newSink(t, "nats://"+p.Addr()+"?subject="+prefix+".x&reconnect_wait=200ms", nil)
	require.Less(t, time.Since(start), 2*time.Second)
	require.False(t, natssink.Connected(s))

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	err := s.Publish(ctx, sinktest.NewMessage("a"))
	cancel()
	require.True(t, outbox.IsRetryable(err), "got %v", err)

	p.Restore()
	m := sinktest.NewMessage("a")
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		return s.Publish(ctx, m) == nil
	}, 15*time.Second, 50*time.Millisecond)
	got := newReceiver(js, stream).Receive(t, 2, time.Second)
	require.NotEmpty(t, got)
	require.Equal(t, m.IDString(), got[len(got)-1].ID)
}

// TestNewDoesNotHang points the sink at a server that accepts connections
// and never speaks: New is bounded by connect_timeout.
func TestNewDoesNotHang(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	start := time.Now()
	s := newSink(t, "nats://"+ln.Addr().String()+"?subject=x&connect_timeout=300ms", nil)
	require.Less(t, time.Since(start), 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = s.Publish(ctx, sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "got %v", err)
}

// TestRecoversFromClosedConnection closes the client connection for good,
// as the library does on a fatal protocol error: the sink dials a new one.
func TestRecoversFromClosedConnection(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	s := newSink(t, "nats://"+upstream+"?subject="+prefix+".x", nil)
	require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))

	natssink.CloseConn(s)
	err := s.Publish(t.Context(), sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "got %v", err)
	m := sinktest.NewMessage("a")
	require.Eventually(t, func() bool { return s.Publish(t.Context(), m) == nil }, 10*time.Second, 20*time.Millisecond)
	got := newReceiver(js, stream).Receive(t, 2, time.Second)
	require.Len(t, got, 2)
	require.Equal(t, m.IDString(), got[1].ID)
}

// TestPublishBufferedDuringReconnect publishes while the client is
// reconnecting, with a deadline long enough to outlast the outage: the
// message waits in the client's reconnect buffer and Publish succeeds only
// once the stream has acknowledged it after the reconnect.
func TestPublishBufferedDuringReconnect(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	p := sinktest.NewProxy(t, upstream)
	// The first reconnect attempt comes after the broker is back.
	s := newSink(t, "nats://"+p.Addr()+"?subject="+prefix+".x&reconnect_wait=1s", nil)
	require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")))
	rcv := newReceiver(js, stream)
	require.Len(t, rcv.Receive(t, 1, 5*time.Second), 1)

	p.Cut()
	require.Eventually(t, func() bool { return !natssink.Connected(s) }, 5*time.Second, 5*time.Millisecond)
	m := sinktest.NewMessage("a")
	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		result <- s.Publish(ctx, m)
	}()
	select {
	case err := <-result:
		// A failed reconnect attempt fails the acks pending at that moment;
		// never with success while the broker is unreachable.
		t.Logf("the buffered publish was failed by a reconnect attempt: %v", err)
		require.True(t, outbox.IsRetryable(err), "got %v", err)
		require.Empty(t, rcv.Receive(t, 1, 200*time.Millisecond))
		p.Restore()
		require.Eventually(t, func() bool { return s.Publish(t.Context(), m) == nil }, 10*time.Second, 20*time.Millisecond)
	case <-time.After(300 * time.Millisecond):
		t.Log("the publish is waiting in the reconnect buffer")
		p.Restore()
		require.NoError(t, <-result)
	}
	got := rcv.Receive(t, 1, 5*time.Second)
	require.Len(t, got, 1, "a success means the stream holds the message")
	require.Equal(t, m.IDString(), got[0].ID)
}

// TestPublishesArePipelined puts 40ms of latency between broker and sink: a
// sink waiting for each ack before sending the next message would need
// 200 x 40ms = 8s for 200 concurrent publishes.
func TestPublishesArePipelined(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	p := newDelayProxy(t, 40*time.Millisecond)
	s := newSink(t, "nats://"+p.addr()+"?subject="+prefix+".x", nil)
	require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("warm-up")))

	const n = 200
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range n {
		wg.Go(func() {
			if err := s.Publish(t.Context(), sinktest.NewMessage(fmt.Sprint(i))); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.Zero(t, failed.Load())
	require.Less(t, elapsed, 2*time.Second, "publishes were serialised")
	require.EqualValues(t, n+1, streamMsgs(t, js, stream))
}

// TestManyInFlight is a throughput smoke test: more publishers than
// max_pending, all succeed, every message stored once.
func TestManyInFlight(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, stream := newStream(t, js, nil)
	s := newSink(t, "nats://"+upstream+"?subject="+prefix+".{aggregate_type}&max_pending=64", nil)
	const workers, per = 128, 40
	elapsed := sinktest.PublishConcurrently(t, s, workers, per, func(w, i int) *outbox.Message {
		return sinktest.NewMessage(fmt.Sprintf("%d-%d", w, i))
	})
	t.Logf("%d publishes in %s", workers*per, elapsed)
	require.EqualValues(t, workers*per, streamMsgs(t, js, stream))
}

// TestContextCancelledWhileWaitingForAck cancels a publish whose ack cannot
// is held up for seconds: it returns promptly, retryable.
func TestContextCancelledWhileWaitingForAck(t *testing.T) {
	t.Parallel()
	js := admin(t, upstream)
	prefix, _ := newStream(t, js, nil)
	p := newDelayProxy(t, 0)
	s := newSink(t, "nats://"+p.addr()+"?subject="+prefix+".x", nil)
	require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("warm-up")))
	p.setDelay(3 * time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := s.Publish(ctx, sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "got %v", err)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), time.Second)
}
