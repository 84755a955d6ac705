package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outbox/internal/testdb"
)

// The brokers of the development machine and CI. A test that cannot reach
// one fails: a skipped broker test would hide a sink that no longer works.
const (
	natsAddr   = "127.0.0.1:4222"
	rabbitAddr = "127.0.0.1:5672"
	redisAddr  = "127.0.0.1:6379"
	mqttAddr   = "127.0.0.1:1883"
)

// brokerMessages is what every broker subtest enqueues: several aggregate
// and event types, an aggregate with two events, and an aggregate id that
// is neither ASCII nor free of blanks (the header encodings must carry it).
var brokerMessages = []struct{ aggregateType, aggregateID, eventType, payload string }{
	{"order", "order-1", "OrderCreated", `{"n": 1, "total": 10.50, "items": ["a", "b"]}`},
	{"order", "order-1", "OrderPaid", `{"n": 2, "note": "<&> \u00e9 \"quoted\""}`},
	{"customer", "顧客-ü 42", "CustomerCreated", `{"n": 3, "name": "Zoë 山田"}`},
	{"invoice", "inv-7", "InvoiceSent", `{"n": 4, "lines": [{"sku": "x", "qty": 2}], "paid": null}`},
	{"customer", "c-9", "CustomerUpdated", `{"n": 5, "ok": true}`},
}

// sent is one enqueued message as the table holds it.
type sent struct {
	id                                    string // the message's identity: its uid
	aggregateType, aggregateID, eventType string
	enqueued                              string // the --payload given
	stored                                string // payload::text, what a sink must send byte for byte
}

// enqueueBrokerMessages enqueues brokerMessages through the CLI.
func enqueueBrokerMessages(t *testing.T, c *cli) []sent {
	t.Helper()
	out := make([]sent, 0, len(brokerMessages))
	for _, m := range brokerMessages {
		r := c.ok(t, "enqueue", "--table", c.table, "--aggregate-type", m.aggregateType,
			"--aggregate-id", m.aggregateID, "--event-type", m.eventType, "--payload", m.payload)
		require.Regexp(t, idLine, r.stdout)
		s := sent{aggregateType: m.aggregateType, aggregateID: m.aggregateID,
			eventType: m.eventType, enqueued: m.payload}
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
			"SELECT uid::text, payload::text FROM "+c.quoted()+" WHERE id = $1", strings.TrimSpace(r.stdout)).Scan(&s.id, &s.stored))
		out = append(out, s)
	}
	return out
}

// delivered is one message as a broker holds it, in broker-neutral terms.
type delivered struct {
	dest    string // subject, routing key, topic or stream key
	dedupe  string // the broker's own deduplication slot (Nats-Msg-Id, message_id, ...)
	meta    map[string]string
	payload []byte
}

// metaKeys are the outbox fields every sink carries besides the payload
// (as Outbox-* headers, or fields of a Redis entry).
var metaKeys = map[string]string{
	"id":             "Outbox-Id",
	"aggregate_type": "Outbox-Aggregate-Type",
	"aggregate_id":   "Outbox-Aggregate-Id",
	"event_type":     "Outbox-Event-Type",
	"attempt":        "Outbox-Attempt",
}

// fromHeaders picks metaKeys out of a broker's headers.
func fromHeaders(get func(string) string) map[string]string {
	m := map[string]string{}
	for k, h := range metaKeys {
		m[k] = get(h)
	}
	return m
}

// runToBroker runs one drain of the table to sinkURL and checks that it
// exits 0 with every row done.
func runToBroker(t *testing.T, c *cli, sinkURL string) {
	t.Helper()
	r := c.ok(t, "run", "--drain", "--table", c.table, "--sink", sinkURL)
	require.Empty(t, r.stdout, "%s", r)
	require.Equal(t, len(brokerMessages), c.count(t, "status = 'done' AND done_at IS NOT NULL AND attempts = 1"), "%s", r)
	require.Equal(t, len(brokerMessages), c.count(t, "true"))
}

// requireDelivered checks that the broker holds each sent message exactly
// once, at its destination, under its id, with its payload byte for byte.
func requireDelivered(t *testing.T, want []sent, got []delivered, dest func(sent) string) {
	t.Helper()
	require.Len(t, got, len(want), "the broker must hold exactly the enqueued messages: %+v", got)
	byID := map[string]sent{}
	for _, s := range want {
		byID[s.id] = s
	}
	seen := map[string]bool{}
	for _, d := range got {
		s, ok := byID[d.dedupe]
		require.True(t, ok, "unknown id %q in the broker's dedupe slot: %+v", d.dedupe, d)
		require.False(t, seen[d.dedupe], "message %s delivered twice", d.dedupe)
		seen[d.dedupe] = true
		require.Equal(t, dest(s), d.dest, "message %s", s.id)
		require.Equal(t, map[string]string{
			"id":             s.id,
			"aggregate_type": s.aggregateType,
			"aggregate_id":   s.aggregateID,
			"event_type":     s.eventType,
			"attempt":        "1",
		}, d.meta, "message %s", s.id)
		require.Equal(t, s.stored, string(d.payload), "message %s: payload changed on the way", s.id)
		require.JSONEq(t, s.enqueued, string(d.payload), "message %s", s.id)
	}
}

// TestRunDeliversToBrokers drains a table to each real broker through the
// binary and reads back what the broker stored.
func TestRunDeliversToBrokers(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, tt := range []struct {
		name string
		fn   func(t *testing.T, bin string)
	}{
		{"NATS", testRunToNATS},
		{"RabbitMQ", testRunToRabbitMQ},
		{"RabbitMQUnroutableGoesDead", testRunToRabbitMQUnroutable},
		{"Kafka", testRunToKafka},
		{"Redis", testRunToRedis},
		{"MQTT", testRunToMQTT},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, bin)
		})
	}
}

// brokerName is a destination name used by this test only: the schema is
// random per test, and it is a valid subject token, queue, topic and key.
func brokerName(c *cli) string { return "outboxd_cli_" + c.schema }

func testRunToNATS(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	msgs := enqueueBrokerMessages(t, c)

	nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(5*time.Second))
	require.NoError(t, err, "NATS with JetStream must run at %s", natsAddr)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	prefix := brokerName(c)
	stream := prefix
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, js.DeleteStream(ctx, stream))
	})

	runToBroker(t, c, "nats://"+natsAddr+"?subject="+prefix+".{aggregate_type}.{event_type}")

	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(msgs)), info.State.Msgs)
	var got []delivered
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		meta := fromHeaders(m.Header.Get)
		// The free-text values travel percent-encoded (NATS headers are ASCII).
		for _, k := range []string{"aggregate_type", "aggregate_id", "event_type"} {
			v, err := url.PathUnescape(meta[k])
			require.NoError(t, err)
			meta[k] = v
		}
		got = append(got, delivered{dest: m.Subject, dedupe: m.Header.Get("Nats-Msg-Id"), meta: meta, payload: m.Data})
	}
	requireDelivered(t, msgs, got, func(s sent) string { return prefix + "." + s.aggregateType + "." + s.eventType })
}

// rabbit opens a channel on the local RabbitMQ, closed when the test ends.
func rabbit(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.DialConfig("amqp://guest:guest@"+rabbitAddr+"/", amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	require.NoError(t, err, "RabbitMQ must run at %s", rabbitAddr)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

func testRunToRabbitMQ(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	msgs := enqueueBrokerMessages(t, c)

	ch := rabbit(t)
	queue := brokerName(c)
	// x-expires removes the queue should the test die before its cleanup.
	_, err := ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-expires": int32(10 * 60 * 1000)})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := ch.QueueDelete(queue, false, false, false)
		require.NoError(t, err)
	})

	runToBroker(t, c, "amqp://guest:guest@"+rabbitAddr+"/?routing_key="+queue)

	var got []delivered
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		meta := fromHeaders(func(k string) string {
			v, _ := d.Headers[k].(string)
			return v
		})
		got = append(got, delivered{dest: d.RoutingKey, dedupe: d.MessageId, meta: meta, payload: d.Body})
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		require.LessOrEqual(t, len(got), len(msgs), "more messages in the queue than were enqueued")
	}
	requireDelivered(t, msgs, got, func(sent) string { return queue })
}

// testRunToRabbitMQUnroutable publishes to a routing key that no queue
// takes: the broker returns each message (mandatory), which is permanent, so
// the messages go dead on their first attempt and the drain still ends well.
func testRunToRabbitMQUnroutable(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	msgs := enqueueBrokerMessages(t, c)
	rabbit(t) // the broker must be up, or the dead rows would prove nothing
	key := brokerName(c) + "_unbound"

	r := c.ok(t, "run", "--drain", "--table", c.table, "--sink", "amqp://guest:guest@"+rabbitAddr+"/?routing_key="+key)
	require.Contains(t, r.stderr, "summary")
	require.Equal(t, len(msgs), c.count(t, "status = 'dead' AND attempts = 1"), "%s", r)

	r = c.ok(t, "dead", "list", "--json", "--table", c.table)
	var list []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), "%s", r)
	require.Len(t, list, len(msgs))
	var ids []string
	for _, m := range list {
		ids = append(ids, stringOf(t, m["uid"]))
		lastError := stringOf(t, m["last_error"])
		require.Contains(t, lastError, "returned", "last_error must say the broker returned the message")
		require.Contains(t, lastError, key, "last_error must name the routing key")
		require.NotContains(t, lastError, "guest:guest")
	}
	var want []string
	for _, s := range msgs {
		want = append(want, s.id)
	}
	require.ElementsMatch(t, want, ids)
}

func testRunToKafka(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	msgs := enqueueBrokerMessages(t, c)

	topic := brokerName(c)
	// kfake listens on 127.0.0.1 and advertises that address, so the child
	// process reaches it after the bootstrap too.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	addr := cluster.ListenAddrs()[0]

	runToBroker(t, c, "kafka://"+addr+"?topic="+topic)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var (
		records []*kgo.Record
		hwm     int64
	)
	for len(records) < len(msgs) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil {
				require.NoError(t, err, "fetching %s/%d", topic, p)
			}
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			hwm = p.HighWatermark
			records = append(records, p.Records...)
		})
	}
	// All produces were acknowledged before run exited: the high watermark
	// counts every record the topic holds.
	require.Equal(t, int64(len(msgs)), hwm, "records in the topic")
	var got []delivered
	for _, rec := range records {
		h := map[string]string{}
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
		}
		meta := fromHeaders(func(k string) string { return h[k] })
		got = append(got, delivered{dest: rec.Topic, dedupe: h["Outbox-Id"], meta: meta, payload: rec.Value})
		require.Equal(t, meta["aggregate_id"], string(rec.Key), "the record key is the aggregate id")
	}
	requireDelivered(t, msgs, got, func(sent) string { return topic })
}

func testRunToRedis(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	msgs := enqueueBrokerMessages(t, c)

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DialTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, rdb.Ping(ctx).Err(), "Redis must run at %s", redisAddr)
	key := "outboxd-cli:" + c.schema
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rdb.Del(ctx, key).Err())
	})

	runToBroker(t, c, "redis://"+redisAddr+"/0?stream="+key)

	entries, err := rdb.XRange(ctx, key, "-", "+").Result()
	require.NoError(t, err)
	var got []delivered
	for _, e := range entries {
		field := func(k string) string {
			v, _ := e.Values[k].(string)
			return v
		}
		meta := map[string]string{}
		for k := range metaKeys {
			meta[k] = field(k)
		}
		got = append(got, delivered{dest: key, dedupe: field("id"), meta: meta, payload: []byte(field("payload"))})
	}
	requireDelivered(t, msgs, got, func(sent) string { return key })
}

// mqttSubscriber records what a QoS 1 subscription receives.
type mqttSubscriber struct {
	client *paho.Client
	mu     sync.Mutex
	got    []*paho.Publish
}

func (s *mqttSubscriber) received() []*paho.Publish {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func subscribeMQTT(t *testing.T, clientID, filter string) *mqttSubscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", mqttAddr)
	require.NoError(t, err, "an MQTT 5 broker must run at %s", mqttAddr)
	s := &mqttSubscriber{}
	s.client = paho.NewClient(paho.ClientConfig{
		Conn:     conn,
		ClientID: clientID,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				s.mu.Lock()
				s.got = append(s.got, pr.Packet)
				s.mu.Unlock()
				return true, nil
			},
		},
	})
	ca, err := s.client.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30})
	require.NoError(t, err)
	require.Equal(t, byte(0), ca.ReasonCode)
	t.Cleanup(func() { _ = s.client.Disconnect(&paho.Disconnect{ReasonCode: 0}) })
	sa, err := s.client.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	require.NoError(t, err)
	require.Equal(t, []byte{1}, sa.Reasons, "subscription granted at QoS 1")
	return s
}

func testRunToMQTT(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	msgs := enqueueBrokerMessages(t, c)

	root := "outboxd-cli/" + c.schema
	sub := subscribeMQTT(t, "outboxd-cli-"+c.schema, root+"/#")

	runToBroker(t, c, "mqtt://"+mqttAddr+"?topic="+root+"/{event_type}")

	// A marker published after run exited arrives after everything the
	// broker had acknowledged to run, so once it is here nothing of run's is
	// still on its way.
	marker := root + "/~marker"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := sub.client.Publish(ctx, &paho.Publish{Topic: marker, QoS: 1, Payload: []byte("marker")})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(sub.received(), func(p *paho.Publish) bool { return p.Topic == marker })
	}, 10*time.Second, 10*time.Millisecond, "the marker never came back")

	var got []delivered
	for _, p := range sub.received() {
		if p.Topic == marker {
			continue
		}
		require.Equal(t, byte(1), p.QoS)
		require.NotNil(t, p.Properties)
		require.Equal(t, "application/json", p.Properties.ContentType)
		meta := fromHeaders(p.Properties.User.Get)
		got = append(got, delivered{dest: p.Topic, dedupe: meta["id"], meta: meta, payload: p.Payload})
	}
	requireDelivered(t, msgs, got, func(s sent) string { return root + "/" + s.eventType })
}

// blackHole is a TCP listener that accepts connections and never answers:
// a sink that tried to connect to it would hang, and is recorded.
type blackHole struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackHole{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, conn)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-b.done
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			_ = c.Close()
		}
	})
	return b
}

// visitors returns what each connection made so far sent first. A sentinel
// connection of the test's own goes through the same backlog behind them,
// so once it is accepted every earlier connection has been too.
func (b *blackHole) visitors(t *testing.T) []string {
	t.Helper()
	sentinel, err := net.Dial("tcp", b.ln.Addr().String())
	require.NoError(t, err)
	defer sentinel.Close()
	me := sentinel.LocalAddr().String()
	isSentinel := func(c net.Conn) bool { return c.RemoteAddr().String() == me }
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return slices.ContainsFunc(b.conns, isSentinel)
	}, 5*time.Second, 5*time.Millisecond, "the sentinel connection was not accepted")
	b.mu.Lock()
	others := slices.DeleteFunc(slices.Clone(b.conns), isSentinel)
	b.mu.Unlock()
	var out []string
	for _, c := range others {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 24)
		n, _ := c.Read(buf)
		out = append(out, fmt.Sprintf("%q", buf[:n]))
	}
	return out
}

// TestConfigCheckBrokerURLs checks that config check validates every sink
// scheme offline: a valid URL passes without any connection being made, a
// bad option fails as a usage error, and a password never shows.
func TestConfigCheckBrokerURLs(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	// The database is unreachable too: config check must not need it.
	env := envWith("postgres://u:" + secret + "@127.0.0.1:1/x")
	// check runs config check on tmpl, its "@H" replaced by the address of
	// a black hole of the subtest's own, and returns what the hole saw.
	check := func(t *testing.T, tmpl string) (result, []string) {
		t.Helper()
		hole := newBlackHole(t)
		sinkURL := strings.Replace(tmpl, "@H", "@"+hole.ln.Addr().String(), 1)
		// No timing bound: the black hole's visitors say whether anything
		// was dialled, however slow the machine.
		r := runBin(t, bin, env, nil, "config", "check", "--sink", sinkURL)
		require.NotContains(t, r.stdout+r.stderr, secret, "%s", r)
		return r, hole.visitors(t)
	}
	// mqttValid are the MQTT URLs, whose sink connects in the background
	// as soon as it is built: config check must validate them without
	// building it (CheckDoesNotDialMQTT repeats the check to catch a race).
	mqttValid := []string{
		"mqtt://u:" + secret + "@H?topic=outbox/{aggregate_type}/{event_type}",
		"mqtts://u:" + secret + "@H?topic=t&keepalive=10s",
	}
	// name is a subtest's name for a URL template: without the password.
	name := func(tmpl string) string {
		scheme, rest, _ := strings.Cut(tmpl, ":")
		if _, after, ok := strings.Cut(rest, "@H"); ok {
			rest = after
		}
		return url.PathEscape(scheme + rest)
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		for _, tmpl := range []string{
			"nats://u:" + secret + "@H?subject=outbox.{aggregate_type}.{event_type}&create_stream=OUTBOX",
			"nats+tls://u:" + secret + "@H?subject=a.{event_type}&timeout=5s",
			"amqp://guest:" + secret + "@H/?routing_key=orders&channels=2",
			"amqps://app:" + secret + "@H/prod?exchange=events.{aggregate_type}&routing_key={event_type}",
			"kafka://u:" + secret + "@H?topic=outbox.{aggregate_type}&sasl=scram-sha-512&tls=true&acks=all",
			"redis://:" + secret + "@H/0?stream=outbox:{aggregate_type}&maxlen=1000",
			"rediss://u:" + secret + "@H/1?stream=s&pipeline=on",
			mqttValid[0],
			mqttValid[1],
			"http://u:" + secret + "@H/hook",
			"https://u:" + secret + "@H/hook",
			"stdout:",
			"stdout",
			"null:",
		} {
			t.Run(name(tmpl), func(t *testing.T) {
				t.Parallel()
				r, visitors := check(t, tmpl)
				requireOK(t, r)
				require.Contains(t, r.stdout, "configuration is valid", "%s", r)
				require.Regexp(t, `(?m)^sink\s+\S+\s+flag$`, r.stdout)
				require.Empty(t, visitors, "config check connected to the sink's address\n%s", r)
			})
		}
	})

	bad := func(t *testing.T, cases [][2]string) {
		t.Helper()
		for _, tt := range cases {
			tmpl, mention := tt[0], tt[1]
			t.Run(name(tmpl), func(t *testing.T) {
				t.Parallel()
				r, visitors := check(t, tmpl)
				requireFailure(t, r, 2)
				require.Contains(t, r.stderr, mention, "%s", r)
				require.Empty(t, visitors, "config check connected to the sink's address\n%s", r)
			})
		}
	}

	t.Run("BadOption", func(t *testing.T) {
		t.Parallel()
		bad(t, [][2]string{
			{"nats://u:" + secret + "@H?subject=a.{nope}", "{nope}"},
			{"nats://u:" + secret + "@H?subjct=a.b", "subjct"},
			{"nats+tls://u:" + secret + "@H?subject=a..b", "subject"},
			{"amqp://guest:" + secret + "@H/?channels=0", "channels"},
			{"amqp://guest:" + secret + "@H/?routing_key=a.{nope}", "{nope}"},
			{"amqps://guest:" + secret + "@H/?heartbeat=0", "heartbeat"},
			{"kafka://u:" + secret + "@H?sasl=plain&acks=1", "acks"},
			{"kafka://u:" + secret + "@H?topic=a/b", "topic"},
			{"redis://:" + secret + "@H/0?maxlen=-1", "maxlen"},
			{"redis://:" + secret + "@H/0?stream=a&strem=b", "strem"},
			{"rediss://:" + secret + "@H/0?idmp=maybe", "idmp"},
			{"mqtt://u:" + secret + "@H?topic=a/%2B/b", "topic"},
			{"mqtt://u:" + secret + "@H?topic=$SYS/x", "topic"},
			{"mqtts://u:" + secret + "@H?keepalive=soon", "keepalive"},
		})
	})

	// URLs that would publish somewhere else than written are refused: a
	// `+` in a query is a space to url.ParseQuery (`topic=a/+/b` would be
	// "a/ /b"), and a raw `#` starts a fragment that would be dropped
	// (`topic=a/#` would be "a/", `stream=orders#eu` "orders").
	t.Run("AmbiguousURLsRefused", func(t *testing.T) {
		t.Parallel()
		bad(t, [][2]string{
			{"mqtt://u:" + secret + "@H?topic=a/+/b", "topic"},
			{"mqtt://u:" + secret + "@H?topic=a/#", "#"},
			{"redis://:" + secret + "@H/0?stream=orders#eu", "#"},
			{"amqp://guest:" + secret + "@H/?routing_key=a.#", "#"},
			{"nats://u:" + secret + "@H?subject=a.b#", "#"},
		})
	})

	// config check must never send a CONNECT (credentials included) or a
	// TLS ClientHello to an MQTT broker: building the sink would race its
	// background connection against Close, hence the repetitions.
	t.Run("CheckDoesNotDialMQTT", func(t *testing.T) {
		t.Parallel()
		for _, tmpl := range mqttValid {
			t.Run(name(tmpl), func(t *testing.T) {
				t.Parallel()
				for range 10 {
					r, visitors := check(t, tmpl)
					requireOK(t, r)
					require.Empty(t, visitors, "config check connected to the sink's address\n%s", r)
				}
			})
		}
	})
}
