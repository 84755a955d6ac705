package amqpsink_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/amqpsink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func publishCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Every property and header the sink sets arrives as documented, and the
// routing key template is expanded per message.
func TestPublishPropertiesAndRoutingKeyTemplate(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := uniqueName("amqpsink-test-x")
	a.exchange(t, ex)
	r := a.queue(t, nil, ex, "outbox.order.*")
	s := newSink(t, upstream, url.Values{"exchange": {ex}, "routing_key": {"outbox.{aggregate_type}.{event_type}"}})

	m := sinktest.NewMessage("agg-1")
	m.CreatedAt = time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	require.NoError(t, s.Publish(publishCtx(t), m))

	got := r.wait(1, 10*time.Second)
	require.Len(t, got, 1)
	d := got[0]
	require.Equal(t, ex, d.Exchange)
	require.Equal(t, "outbox.order.OrderCreated", d.RoutingKey)
	require.Equal(t, m.IDString(), d.MessageId)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, "OrderCreated", d.Type)
	require.True(t, m.CreatedAt.Truncate(time.Second).Equal(d.Timestamp), "timestamp %s", d.Timestamp)
	require.Equal(t, string(m.Payload), string(d.Body))
	want := amqp.Table{}
	for _, h := range (sinkutil.Reserved{}).Headers(m) {
		want[h.Key] = h.Value
	}
	require.Equal(t, want, d.Headers)
	require.Equal(t, "2024-05-06T07:08:09.123456Z", d.Headers[sinkutil.HeaderCreatedAt])

	// Another aggregate type expands to a key nothing is bound to.
	other := sinktest.NewMessage("agg-2")
	other.AggregateType = "invoice"
	err := s.Publish(publishCtx(t), other)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
	require.ErrorContains(t, err, "outbox.invoice.OrderCreated")
}

// persistent=false publishes transient messages; mandatory=false lets the
// broker drop an unroutable message and still ack it.
func TestPersistentAndMandatoryOff(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	s := newSink(t, upstream, url.Values{"routing_key": {r.name}, "persistent": {"false"}})
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("a")))
	got := r.wait(1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, amqp.Transient, got[0].DeliveryMode)

	lax := newSink(t, upstream, url.Values{"routing_key": {uniqueName("amqpsink-test-nobody")}, "mandatory": {"false"}})
	require.NoError(t, lax.Publish(publishCtx(t), sinktest.NewMessage("a")))
}

// RabbitMQ has no broker-side deduplication: a message published twice is
// delivered twice, both times with the same message_id for the consumer to
// deduplicate on. Copies of one message published at once all succeed, even
// when there are more of them than channels.
func TestSameMessageTwiceCarriesSameID(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	s := newSink(t, upstream, url.Values{"routing_key": {r.name}, "channels": {"2"}})
	m := sinktest.NewMessage("a")
	require.NoError(t, s.Publish(publishCtx(t), m))
	require.NoError(t, s.Publish(publishCtx(t), m))

	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Publish(publishCtx(t), m) })
	}
	wg.Wait()
	delivered := 2
	for _, err := range errs {
		if err != nil {
			// More copies than channels: the extra ones are told to retry.
			require.True(t, outbox.IsRetryable(err), "want nil or retryable, got %v", err)
			continue
		}
		delivered++
	}
	got := r.wait(delivered, 10*time.Second)
	require.Len(t, got, delivered)
	for _, d := range got {
		require.Equal(t, m.IDString(), d.MessageId)
		require.Equal(t, m.IDString(), d.Headers[sinkutil.HeaderID])
	}
}

// With routable and unroutable messages interleaved on the same channels,
// each basic.return is pinned on exactly the message it returns: every
// routable message succeeds, every unroutable one is permanent.
func TestReturnsAreMatchedToTheirMessage(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := uniqueName("amqpsink-test-x")
	a.exchange(t, ex)
	r := a.queue(t, nil, ex, "ok.#")
	s := newSink(t, upstream, url.Values{"exchange": {ex}, "routing_key": {"{aggregate_type}.{aggregate_id}"}, "channels": {"2"}})

	const n = 400
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = sinktest.NewMessage(strconv.Itoa(i))
		if i%3 == 0 {
			msgs[i].AggregateType = "lost"
		} else {
			msgs[i].AggregateType = "ok"
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				errs[i] = s.Publish(publishCtx(t), msgs[i])
			}
		})
	}
	wg.Wait()
	var want []string
	for i, m := range msgs {
		if m.AggregateType == "lost" {
			require.True(t, outbox.IsPermanent(errs[i]), "message %d: want permanent, got %v", i, errs[i])
		} else {
			require.NoError(t, errs[i], "message %d", i)
			want = append(want, m.IDString())
		}
	}
	got := ids(r.wait(len(want), 10*time.Second))
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got)
}

// A publish to a missing exchange makes the broker close the channel (404):
// that message is permanent, messages to existing exchanges in flight at the
// same time are never reported permanent, and the sink goes on working.
func TestMissingExchangeIsPermanentAndSinkGoesOn(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	prefix := uniqueName("amqpsink-test-x")
	a.exchange(t, prefix+".order")
	r := a.queue(t, nil, prefix+".order", "#")
	s := newSink(t, upstream, url.Values{"exchange": {prefix + ".{aggregate_type}"}, "routing_key": {"k"}, "channels": {"2"}})

	missing := sinktest.NewMessage("a")
	missing.AggregateType = "nothing"
	err := s.Publish(publishCtx(t), missing)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
	require.ErrorContains(t, err, "404")

	// Good and bad messages at once: collateral damage on a closed channel
	// is retryable, and retrying gets every good message through.
	const n = 200
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = sinktest.NewMessage(strconv.Itoa(i))
		if i%20 == 0 {
			msgs[i].AggregateType = "nothing"
		}
	}
	// outcomes[i] lists every result message i got, the last one final.
	outcomes := make([][]error, n)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				for range 20 {
					err := s.Publish(publishCtx(t), msgs[i])
					outcomes[i] = append(outcomes[i], err)
					if !outbox.IsRetryable(err) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	var want []string
	for i, m := range msgs {
		errs := outcomes[i]
		last := errs[len(errs)-1]
		for _, err := range errs[:len(errs)-1] {
			require.True(t, outbox.IsRetryable(err), "message %d: %v", i, err)
		}
		if m.AggregateType == "nothing" {
			require.True(t, outbox.IsPermanent(last), "bad message %d: want permanent, got %v", i, last)
		} else {
			require.NoError(t, last, "good message %d", i)
			want = append(want, m.IDString())
		}
	}
	require.Empty(t, r.waitIDs(want, 10*time.Second), "acked messages not delivered")
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("after")))
}

// A queue that rejects publishes when full makes the broker nack: retryable.
func TestNackIsRetryable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q, err := a.ch.QueueDeclare(uniqueName("amqpsink-test-full"), false, true, true, false,
		amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	s := newSink(t, upstream, url.Values{"routing_key": {q.Name}})
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("a")))
	err = s.Publish(publishCtx(t), sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.ErrorContains(t, err, "nack")
}

// An expanded name over the AMQP limit of 255 bytes is refused before it
// reaches the client library, which would otherwise drop the connection.
func TestOverlongNamesArePermanent(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	s := newSink(t, upstream, url.Values{"routing_key": {r.name + "{aggregate_id}"}})
	long := sinktest.NewMessage(strings.Repeat("x", 300))
	err := s.Publish(publishCtx(t), long)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
	require.ErrorContains(t, err, "255")

	s2 := newSink(t, upstream, url.Values{"exchange": {"{aggregate_id}"}, "routing_key": {r.name}})
	err = s2.Publish(publishCtx(t), long)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)

	// The connection is intact: an empty aggregate id routes to the queue.
	ok := sinktest.NewMessage("")
	require.NoError(t, s.Publish(publishCtx(t), ok))
	require.Equal(t, []string{ok.IDString()}, ids(r.wait(1, 10*time.Second)))
}

// Cutting the link with publishes in flight: each one returns nil or a
// retryable error, a nil is only ever given for a message that is in the
// queue, and retrying after the link is back gets every message through.
func TestCutWithPublishesInFlight(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	p := sinktest.NewProxy(t, upstream)
	s := newSink(t, p.Addr(), url.Values{"routing_key": {r.name}, "reconnect_max": {"200ms"}})

	const n = 600
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = sinktest.NewMessage(strconv.Itoa(i))
	}
	errs := make([]error, n)
	var started sync.WaitGroup
	started.Add(1)
	var once sync.Once
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			for i := w; i < n; i += 24 {
				if i == n/3 {
					once.Do(started.Done)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				errs[i] = s.Publish(ctx, msgs[i])
				cancel()
			}
		})
	}
	started.Wait()
	p.Cut()
	wg.Wait()

	var want, pending []int
	for i, err := range errs {
		if err == nil {
			want = append(want, i)
			continue
		}
		require.True(t, outbox.IsRetryable(err), "message %d: want nil or retryable, got %v", i, err)
		pending = append(pending, i)
	}
	require.NotEmpty(t, pending, "the cut came too late to catch any publish")
	wantIDs := make([]string, len(want))
	for j, i := range want {
		wantIDs[j] = msgs[i].IDString()
	}
	require.Empty(t, r.waitIDs(wantIDs, 10*time.Second), "messages acked but not in the queue")

	p.Restore()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		return s.Publish(ctx, msgs[pending[0]]) == nil
	}, 15*time.Second, 20*time.Millisecond, "sink did not recover")
	for _, i := range pending[1:] {
		require.NoError(t, s.Publish(publishCtx(t), msgs[i]), "message %d after recovery", i)
	}
	all := make([]string, n)
	for i, m := range msgs {
		all[i] = m.IDString()
	}
	require.Empty(t, r.waitIDs(all, 10*time.Second))
}

// A broker that cannot be reached when the sink starts: New still returns
// promptly, publishes fail as retryable at once, and the sink connects on
// its own once the broker is there.
func TestBrokerDownAtNew(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	p := sinktest.NewProxy(t, upstream)
	p.Cut()
	start := time.Now()
	s := newSink(t, p.Addr(), url.Values{"routing_key": {r.name}, "reconnect_max": {"200ms"}})
	require.Less(t, time.Since(start), 5*time.Second)

	m := sinktest.NewMessage("a")
	start = time.Now()
	err := s.Publish(publishCtx(t), m)
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.Less(t, time.Since(start), time.Second, "a publish while down should fail at once")
	require.ErrorContains(t, err, "guest@"+p.Addr())
	require.NotContains(t, err.Error(), "guest:guest")

	p.Restore()
	require.Eventually(t, func() bool { return s.Publish(publishCtx(t), m) == nil }, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, m.IDString(), ids(r.wait(1, 10*time.Second))[0])
}

// Credentials or a vhost the broker refuses are configuration errors: New
// fails, and the error does not carry the password.
func TestRefusedCredentialsFailNew(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"WrongPassword": "amqp://guest:s3cr3t-wrong@" + upstream + "/?routing_key=q",
		"UnknownUser":   "amqp://nobody-here:s3cr3t-wrong@" + upstream + "/?routing_key=q",
		"UnknownVhost":  "amqp://guest:guest@" + upstream + "/no-such-vhost?routing_key=q",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			s, err := amqpsink.New(raw, nil)
			require.Error(t, err)
			require.Nil(t, s)
			require.Less(t, time.Since(start), 10*time.Second)
			require.NotContains(t, err.Error(), "s3cr3t")
			require.True(t, amqpsink.IsConfigError(err), "want a config error, got %v", err)
		})
	}
}

func TestCloseIsIdempotentAndPublishAfterCloseIsRetryable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	s, err := amqpsink.New(sinkURL(upstream, url.Values{"routing_key": {r.name}}), nil)
	require.NoError(t, err)
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("a")))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	err = s.Publish(publishCtx(t), sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.ErrorContains(t, err, "closed")
}

func TestTLSConfigNeedsAmqps(t *testing.T) {
	t.Parallel()
	_, err := amqpsink.New("amqp://guest:guest@"+upstream+"/?routing_key=q", &amqpsink.Options{TLSConfig: &tls.Config{}})
	require.ErrorContains(t, err, "amqps")
}

// amqps:// to a port that does not speak TLS: the handshake fails, which is
// not a configuration verdict (the broker may be mid-restart), so the sink
// is built and its publishes are retryable, naming the TLS failure.
func TestAmqpsToPlainPortIsRetryable(t *testing.T) {
	t.Parallel()
	s, err := amqpsink.New("amqps://guest:guest@"+upstream+"/?routing_key=q&connection_timeout=2000",
		&amqpsink.Options{TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	err = s.Publish(publishCtx(t), sinktest.NewMessage("a"))
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.ErrorContains(t, err, "tls")
}

// Many publishes in flight at once over the channel pool, all confirmed.
func TestManyInFlight(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	s := newSink(t, upstream, url.Values{"routing_key": {r.name}})
	const n, workers = 3000, 64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := s.Publish(publishCtx(t), sinktest.NewMessage(fmt.Sprint(i))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, r.wait(n, 20*time.Second), n)
	t.Logf("%d publishes with %d in flight: %s (%.0f msgs/s)", n, workers, elapsed, n/elapsed.Seconds())
	require.Less(t, elapsed, 20*time.Second)
}

// A broker that stops answering: no confirm ever comes, and with large
// messages the socket write itself blocks. Each publish still ends with its
// context, as retryable, and the sink works again once the link flows.
func TestStalledBrokerEndsWithContext(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	p := newStallProxy(t)
	s := newSink(t, p.Addr(), url.Values{"routing_key": {r.name}})
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("a")))

	p.Stall()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	start := time.Now()
	err := s.Publish(ctx, sinktest.NewMessage("a"))
	cancel()
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	// The stall lasts until Resume, so a publish that ignored its context
	// would never return; the bound only has to be far below forever.
	require.Less(t, time.Since(start), 10*time.Second)

	// 32 MiB is more than the socket buffers on both sides of the proxy
	// hold, so some of these writes block.
	big := make([]*outbox.Message, 8)
	for i := range big {
		big[i] = sinktest.NewMessage("big")
		big[i].Payload = []byte(`"` + strings.Repeat("x", 4<<20) + `"`)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(big))
	elapsed := make([]time.Duration, len(big))
	for i, m := range big {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			errs[i] = s.Publish(ctx, m)
			elapsed[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range big {
		require.True(t, outbox.IsRetryable(errs[i]), "message %d: want retryable, got %v", i, errs[i])
		require.Less(t, elapsed[i], 10*time.Second, "message %d overran its context", i)
	}

	p.Resume()
	m := sinktest.NewMessage("after")
	require.NoError(t, s.Publish(publishCtx(t), m))
	require.Empty(t, r.waitIDs([]string{m.IDString()}, 10*time.Second))
}

// ctl runs rabbitmqctl against the local broker, for the tests that need a
// user of their own.
func ctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %s: %s", strings.Join(args, " "), out)
}

// newUser adds a broker user with the given permissions on vhost / and
// deletes it when the test ends.
func newUser(t *testing.T, password, configure, write, read string) string {
	t.Helper()
	name := uniqueName("amqpsink-test-user")
	ctl(t, "add_user", name, password)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "rabbitmqctl", "-q", "delete_user", name).Run()
	})
	ctl(t, "set_permissions", "-p", "/", name, configure, write, read)
	return name
}

// A user without write access to the exchange: the broker closes the
// channel with 403 naming the exchange, a condition of the credentials
// (unavailable), and other exchanges stay usable.
func TestWriteAccessRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	user := newUser(t, "pw", ".*", "^amq\\.default$", ".*")
	ex := uniqueName("amqpsink-test-x")
	a.exchange(t, ex)
	raw := func(exchange, key string) string {
		return (&url.URL{Scheme: "amqp", User: url.UserPassword(user, "pw"), Host: upstream, Path: "/",
			RawQuery: url.Values{"exchange": {exchange}, "routing_key": {key}}.Encode()}).String()
	}
	s, err := amqpsink.New(raw(ex, "k"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	err = s.Publish(publishCtx(t), sinktest.NewMessage("a"))
	require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
	require.ErrorContains(t, err, "403")

	allowed, err := amqpsink.New(raw("", r.name), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = allowed.Close() })
	m := sinktest.NewMessage("a")
	require.NoError(t, allowed.Publish(publishCtx(t), m))
	require.Empty(t, r.waitIDs([]string{m.IDString()}, 10*time.Second))
}

// Credentials that stop working while the sink runs: once two reconnection
// attempts in a row are refused, publishes fail as unavailable (never
// permanent); once the credentials work again the sink delivers, with no
// restart.
func TestCredentialsRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	user := newUser(t, "old-pw", ".*", ".*", ".*")
	p := sinktest.NewProxy(t, upstream)
	raw := (&url.URL{Scheme: "amqp", User: url.UserPassword(user, "old-pw"), Host: p.Addr(), Path: "/",
		RawQuery: url.Values{"routing_key": {r.name}, "reconnect_max": {"200ms"}}.Encode()}).String()
	s, err := amqpsink.New(raw, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("a")))

	ctl(t, "change_password", user, "new-pw")
	p.Cut()
	p.Restore()
	m := sinktest.NewMessage("a")
	last := publishUntil(t, s, m, func(err error) bool { return err == nil || outbox.IsUnavailable(err) })
	require.True(t, outbox.IsUnavailable(last), "want unavailable, got %v", last)
	require.ErrorContains(t, last, "403")
	require.NotContains(t, last.Error(), "old-pw")

	ctl(t, "change_password", user, "old-pw")
	require.Eventually(t, func() bool { return s.Publish(publishCtx(t), m) == nil }, 20*time.Second, 50*time.Millisecond)
	require.Empty(t, r.waitIDs([]string{m.IDString()}, 10*time.Second))
}
