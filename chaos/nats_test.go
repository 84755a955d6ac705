//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsAddr is the shared nats-server the broker variant publishes to
// ($CHAOS_NATS_ADDR, host:port, overrides it).
func natsAddr() string {
	if a := os.Getenv("CHAOS_NATS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:4222"
}

// natsRecorder is the broker variant's receiving end: streams of the
// run's own on the shared nats-server, one per group. What the streams
// hold at the end is what was delivered; the harness never publishes.
type natsRecorder struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	streams map[string]string // group -> stream
	prefix  string            // every subject of the run starts with prefix + "."
}

// newNATSRecorder creates the run's streams (file storage, a 1 s
// duplicate window) and deletes them at cleanup. The window is short on
// purpose: JetStream's own dedupe on Nats-Msg-Id would otherwise swallow
// the re-publishes of a new lease, and the checker must count those. One
// stream per group, because Nats-Msg-Id is the outbox id alone: the
// groups' tables number their rows independently, and in one stream a
// row of one would be deduplicated against the same id of the other.
func newNATSRecorder(t *testing.T, name string, groups []string) *natsRecorder {
	t.Helper()
	addr := natsAddr()
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		t.Fatalf("no nats-server at %s (set CHAOS_NATS_ADDR): %v", addr, err)
	} else {
		c.Close()
	}
	nc, err := nats.Connect("nats://"+addr, nats.Name("chaos-harness"), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connecting to nats-server at %s: %v", addr, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Unique per process and run, so concurrent suites on the shared
	// server never meet.
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(os.Getpid())
	tag := strings.ToUpper(nonIdent.ReplaceAllString(strings.ToLower(name), "_")) + "_" + nonce
	rec := &natsRecorder{nc: nc, js: js, streams: map[string]string{}, prefix: "chaos." + strings.ToLower(tag)}
	for _, g := range groups {
		stream := "CHAOS_" + tag + "_" + strings.ToUpper(g)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: []string{rec.prefix + "." + g + ".>"},
			Storage: jetstream.FileStorage, Duplicates: time.Second,
		})
		cancel()
		if err != nil {
			t.Fatalf("creating stream %s: %v", stream, err)
		}
		rec.streams[g] = stream
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := js.DeleteStream(ctx, stream); err != nil {
				t.Logf("deleting stream %s: %v", stream, err)
			}
		})
	}
	return rec
}

// sinkURL is a worker's sink: one subject prefix per group, so the
// stream's messages say which table they came from. The short reconnect
// wait makes recovery after a link fault quick.
func (n *natsRecorder) sinkURL(proxyAddr, group, owner string) string {
	return fmt.Sprintf("nats://%s?subject=%s.%s.{aggregate_type}.{event_type}&name=%s&reconnect_wait=200ms&connect_timeout=2s",
		proxyAddr, n.prefix, group, url.QueryEscape(owner))
}

// snapshot reads every message of the streams as a delivery. The owner is
// not on the message: the checker maps it from the audit trail by
// (id, token). A stored message counts as acknowledged when stored
// (Received = Acked = the stream's timestamp): whether its PubAck reached
// the worker is not visible here.
func (n *natsRecorder) snapshot() ([]delivery, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []delivery
	for _, stream := range n.streams {
		st, err := n.js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		for seq := info.State.FirstSeq; seq != 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading message %d of %s: %w", seq, stream, err)
			}
			out = append(out, n.delivery(m))
		}
	}
	return out, nil
}

func (n *natsRecorder) delivery(m *jetstream.RawStreamMsg) delivery {
	group, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, n.prefix+"."), ".")
	dec := func(k string) string {
		v, err := url.PathUnescape(m.Header.Get(k))
		if err != nil {
			return "undecodable header " + k + ": " + m.Header.Get(k)
		}
		return v
	}
	id, _ := strconv.ParseInt(m.Header.Get("Outbox-Row-Id"), 10, 64)
	key := m.Header.Get(jetstream.MsgIDHeader)
	if oid := m.Header.Get("Outbox-Id"); oid != key {
		// Corrupted metadata must not pass as a clean delivery.
		id = -1
	}
	token, _ := strconv.ParseInt(m.Header.Get("Outbox-Fencing-Token"), 10, 64)
	attempt, _ := strconv.Atoi(m.Header.Get("Outbox-Attempt"))
	return delivery{Seq: int64(m.Sequence), Group: group, ID: id, Key: key, Token: token, Attempt: attempt,
		Received: m.Time, Acked: m.Time, Answer: answerOK,
		Agg: dec("Outbox-Aggregate-Id"), EventType: dec("Outbox-Event-Type"), body: m.Data}
}

// ownersFromShards names the owner of each delivery that does not carry
// one (the broker's) under shard leases: the incarnation whose takeover
// gave the delivery's row's shard the delivery's token.
func ownersFromShards(dels []delivery, rows map[int64]rowState, acqs []shardAcq) {
	holder := map[[2]int64]string{}
	for _, a := range acqs {
		holder[[2]int64{int64(a.shard), a.token}] = a.owner
	}
	for i := range dels {
		if row, ok := rows[dels[i].ID]; ok && dels[i].Path == "" {
			dels[i].Path = holder[[2]int64{int64(row.shard), dels[i].Token}]
		}
	}
}

// ownersFromAudit names the owner of each delivery that does not carry
// one (the broker's): the incarnation whose claim took the lease the
// delivery's token is.
func ownersFromAudit(dels []delivery, audit []auditRec) {
	holder := map[leaseKey]string{}
	for _, a := range audit {
		if a.newStatus == "processing" && (a.oldStatus != "processing" || a.newVersion != a.oldVersion) {
			holder[leaseKey{a.id, a.newVersion}] = a.app
		}
	}
	for i := range dels {
		if dels[i].Path == "" {
			dels[i].Path = holder[leaseKey{dels[i].ID, dels[i].Token}]
		}
	}
}

// natsFaults is the broker variant's menu: the HTTP receiver's refusals,
// hangs and drops have no broker counterpart the suite can cause without
// disturbing other users of the shared server, so the worker↔broker link
// takes their weight (cut, black hole, reset).
var natsFaults = func() []weightedFault {
	var out []weightedFault
	for _, w := range weightedFaults {
		switch w.kind {
		case faultSink5xx, faultSink429, faultSink425, faultSinkHang, faultSinkDrop:
			continue
		case faultSinkCut, faultSinkBlackHole:
			w.weight = 3
		}
		out = append(out, w)
	}
	return append(out, weightedFault{faultSinkReset, 3})
}()

// TestRandomFaultsNATS is tier 2 against a broker sink: the random-fault
// run with every worker publishing to NATS JetStream through its own
// faultable link ($CHAOS_NATS_DURATION, 45 s by default).
func TestRandomFaultsNATS(t *testing.T) {
	t.Parallel()
	dur := 45 * time.Second
	if v := os.Getenv("CHAOS_NATS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	// Before the cluster starts: skipping leaves nothing behind.
	if c, err := net.DialTimeout("tcp", natsAddr(), 2*time.Second); err != nil {
		t.Fatalf("no nats-server at %s (set CHAOS_NATS_ADDR): %v", natsAddr(), err)
	} else {
		c.Close()
	}
	s := seed(t)
	c := runClasses(t)
	e := newEnv(t)
	cfg := withLeaseMode(randomConfig("random-nats", "2-random-nats-45s", s, c), leaseMode(t, s))
	cfg.sink = sinkNATS
	r := newRun(t, e, cfg, s)
	faults := planFrom(menuFor(natsFaults, c, false), rand.New(rand.NewPCG(s, 1)), dur, len(r.allSlots()), r.cfg.lease, 10*time.Second)
	r.startAll()
	r.startProducers(60*time.Millisecond, 0)
	r.phaseStart = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	r.chaos(ctx, faults)
	<-ctx.Done()
	r.phaseEnd = time.Now()
	rep := r.finish()
	if rep.Committed == 0 || rep.DeliveredUnique == 0 {
		t.Errorf("nothing went through: %+v", rep.counts)
	}
	if rep.FaultCounts[faultSinkCut]+rep.FaultCounts[faultSinkBlackHole]+rep.FaultCounts[faultSinkReset] == 0 {
		t.Errorf("no fault of the worker↔broker link was injected: %v", rep.FaultCounts)
	}
}
