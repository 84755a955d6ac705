package amqpsink_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/amqpsink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// upstream is the local RabbitMQ every test needs; a test fails, not skips,
// when it is not there.
const upstream = "127.0.0.1:5672"

// sinkURL is the URL of a sink reaching the broker through addr.
func sinkURL(addr string, query url.Values) string {
	u := url.URL{Scheme: "amqp", User: url.UserPassword("guest", "guest"), Host: addr, Path: "/", RawQuery: query.Encode()}
	return u.String()
}

func newSink(t testing.TB, addr string, query url.Values) *amqpsink.Sink {
	t.Helper()
	s, err := amqpsink.New(sinkURL(addr, query), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// admin is a direct connection to the broker for declaring what a test
// needs; everything it declares is auto-delete or exclusive, so it goes
// away with the connection at cleanup.
type admin struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(t testing.TB) *admin {
	t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@" + upstream + "/")
	require.NoError(t, err, "RabbitMQ must run at %s", upstream)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return &admin{conn: conn, ch: ch}
}

// exchange declares an auto-delete topic exchange.
func (a *admin) exchange(t testing.TB, name string) {
	t.Helper()
	require.NoError(t, a.ch.ExchangeDeclare(name, amqp.ExchangeTopic, false, true, false, false, nil))
}

// queue declares an exclusive queue, binds it to exchange with each key
// (none for the default exchange, which routes by queue name), and consumes
// it.
func (a *admin) queue(t testing.TB, args amqp.Table, exchange string, keys ...string) *receiver {
	t.Helper()
	q, err := a.ch.QueueDeclare(uniqueName("amqpsink-test"), false, true, true, false, args)
	require.NoError(t, err)
	for _, k := range keys {
		require.NoError(t, a.ch.QueueBind(q.Name, k, exchange, false, nil))
	}
	ch, err := a.conn.Channel()
	require.NoError(t, err)
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	r := &receiver{name: q.Name, changed: make(chan struct{}), done: make(chan struct{})}
	go r.collect(deliveries)
	t.Cleanup(func() {
		_ = ch.Close()
		<-r.done
	})
	return r
}

// receiver is a [sinktest.Receiver] over one queue.
type receiver struct {
	name string
	done chan struct{}

	mu      sync.Mutex
	raw     []amqp.Delivery
	changed chan struct{}
	cursor  int // deliveries already handed out by Receive
}

func (r *receiver) collect(deliveries <-chan amqp.Delivery) {
	defer close(r.done)
	for d := range deliveries {
		r.mu.Lock()
		r.raw = append(r.raw, d)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// wait returns every delivery so far once there are at least n, or what
// there is when timeout passes.
func (r *receiver) wait(n int, timeout time.Duration) []amqp.Delivery {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got, changed := append([]amqp.Delivery(nil), r.raw...), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			return got
		}
	}
}

// waitIDs waits up to timeout for a delivery of every id in want (there
// may be duplicates besides) and returns the ids missing when it gives up.
func (r *receiver) waitIDs(want []string, timeout time.Duration) (missing []string) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		seen := make(map[string]bool, len(r.raw))
		for _, d := range r.raw {
			seen[d.MessageId] = true
		}
		changed := r.changed
		r.mu.Unlock()
		missing = missing[:0]
		for _, id := range want {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return missing
		}
	}
}

// Receive returns what arrived since the previous call: a publish is
// confirmed before the consumer has the message, so a cumulative answer
// could satisfy n with older messages.
func (r *receiver) Receive(_ *testing.T, n int, timeout time.Duration) []sinktest.Received {
	r.mu.Lock()
	from := r.cursor
	r.mu.Unlock()
	raw := r.wait(from+n, timeout)[from:]
	r.mu.Lock()
	r.cursor = from + len(raw)
	r.mu.Unlock()
	out := make([]sinktest.Received, len(raw))
	for i, d := range raw {
		out[i] = sinktest.Received{
			ID:      d.MessageId,
			Payload: d.Body,
			Meta: map[string]string{
				"event_type":     header(d, sinkutil.HeaderEventType),
				"aggregate_type": header(d, sinkutil.HeaderAggregateType),
				"aggregate_id":   header(d, sinkutil.HeaderAggregateID),
				"fencing_token":  header(d, sinkutil.HeaderFencingToken),
				"attempt":        header(d, sinkutil.HeaderAttempt),
			},
		}
	}
	return out
}

func header(d amqp.Delivery, key string) string {
	v, ok := d.Headers[key]
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func ids(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

// stallProxy forwards TCP to upstream and can stall: stop moving bytes in
// both directions without closing anything, as a broker that stops reading
// (a memory alarm) or a network that drops packets would look.
type stallProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	flow  chan struct{} // closed while bytes flow
	conns []net.Conn
}

func newStallProxy(t testing.TB) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, flow: make(chan struct{})}
	close(p.flow)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		p.Resume()
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) Addr() string { return p.ln.Addr().String() }

func (p *stallProxy) Stall() {
	p.mu.Lock()
	p.flow = make(chan struct{})
	p.mu.Unlock()
}

func (p *stallProxy) Resume() {
	p.mu.Lock()
	select {
	case <-p.flow:
	default:
		close(p.flow)
	}
	p.mu.Unlock()
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			flow := p.flow
			p.mu.Unlock()
			<-flow
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
