package natssink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/sinktest"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// upstream is the NATS server (with JetStream) the tests run against.
const upstream = "127.0.0.1:4222"

var nextName atomic.Int64

// uniqueName returns a name no other test (or earlier run) uses; it is a
// valid subject token and stream name.
func uniqueName(kind string) string {
	return fmt.Sprintf("nsk_%s_%d_%d_%d", kind, os.Getpid(), time.Now().UnixNano()%1e9, nextName.Add(1))
}

// admin connects to the broker directly (no proxy) for setting up streams
// and reading what arrived.
func admin(t testing.TB, addr string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+addr, append([]nats.Option{nats.Timeout(5 * time.Second)}, opts...)...)
	require.NoError(t, err, "NATS with JetStream must run at %s", addr)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// newStream creates a memory stream taking prefix.> for a fresh prefix and
// deletes it when the test ends.
func newStream(t testing.TB, js jetstream.JetStream, mutate func(*jetstream.StreamConfig)) (prefix, name string) {
	t.Helper()
	prefix, name = uniqueName("p"), uniqueName("S")
	cfg := jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	deleteAtCleanup(t, js, name)
	return prefix, name
}

func deleteAtCleanup(t testing.TB, js jetstream.JetStream, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("deleting stream %s: %v", name, err)
		}
	})
}

// receiver reads a stream by sequence, from where the previous call stopped.
type receiver struct {
	js     jetstream.JetStream
	stream string
	next   uint64
}

func newReceiver(js jetstream.JetStream, stream string) *receiver {
	return &receiver{js: js, stream: stream, next: 1}
}

func (r *receiver) Receive(t *testing.T, n int, timeout time.Duration) []sinktest.Received {
	raw := r.receiveRaw(t, n, timeout)
	out := make([]sinktest.Received, len(raw))
	for i, m := range raw {
		out[i] = toReceived(t, m)
	}
	return out
}

func (r *receiver) receiveRaw(t testing.TB, n int, timeout time.Duration) []*jetstream.RawStreamMsg {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []*jetstream.RawStreamMsg
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := r.js.Stream(ctx, r.stream)
		if (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)) &&
			time.Now().Before(deadline) {
			// The server is reloading its configuration (a credential
			// test's break or heal): its JetStream API is back in a moment
			// (until then it has no responders, or reports JetStream
			// not enabled for the account being reloaded).
			cancel()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		require.NoError(t, err)
		last := st.CachedInfo().State.LastSeq
		for r.next <= last && len(out) < n {
			m, err := st.GetMsg(ctx, r.next)
			r.next++
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			require.NoError(t, err)
			out = append(out, m)
		}
		cancel()
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func toReceived(t testing.TB, m *jetstream.RawStreamMsg) sinktest.Received {
	t.Helper()
	dec := func(k string) string {
		v, err := url.PathUnescape(m.Header.Get(k))
		require.NoError(t, err, k)
		return v
	}
	return sinktest.Received{
		ID:      m.Header.Get(jetstream.MsgIDHeader),
		Payload: m.Data,
		Meta: map[string]string{
			"id":             m.Header.Get(sinkutil.HeaderID),
			"event_type":     dec(sinkutil.HeaderEventType),
			"aggregate_type": dec(sinkutil.HeaderAggregateType),
			"aggregate_id":   dec(sinkutil.HeaderAggregateID),
			"fencing_token":  m.Header.Get(sinkutil.HeaderFencingToken),
			"attempt":        m.Header.Get(sinkutil.HeaderAttempt),
			"created_at":     m.Header.Get(sinkutil.HeaderCreatedAt),
		},
	}
}

func streamMsgs(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	require.NoError(t, err)
	return st.CachedInfo().State.Msgs
}

func newSink(t testing.TB, rawURL string, opts *natssink.Options) *natssink.Sink {
	t.Helper()
	s, err := natssink.New(rawURL, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// delayProxy forwards to upstream and holds every chunk the server sends
// for delay before passing it on, as a distant broker would: a sink that
// waits for one ack before sending the next message pays delay per message.
type delayProxy struct {
	ln    net.Listener
	delay atomic.Int64 // time.Duration
	done  chan struct{}
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newDelayProxy(t testing.TB, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &delayProxy{ln: ln, done: make(chan struct{})}
	p.setDelay(delay)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		close(p.done)
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

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

// setDelay changes the delay of the chunks read from now on.
func (p *delayProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *delayProxy) accept() {
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
		p.wg.Add(3)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			_ = server.Close()
			_ = client.Close()
		}()
		type chunk struct {
			b   []byte
			due time.Time
		}
		ch := make(chan chunk, 1024)
		go func() {
			defer p.wg.Done()
			defer close(ch)
			for {
				buf := make([]byte, 32<<10)
				n, err := server.Read(buf)
				if n > 0 {
					ch <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer p.wg.Done()
			for c := range ch {
				select {
				case <-time.After(time.Until(c.due)):
				case <-p.done:
					_ = client.Close()
					for range ch {
					}
					return
				}
				if _, err := client.Write(c.b); err != nil {
					_ = server.Close()
				}
			}
			_ = client.Close()
		}()
	}
}

// startServer runs a private nats-server with config (which must not set
// listen or ports_file_dir) and returns its host:port. It is stopped when
// the test ends.
func startServer(t testing.TB, config string) string {
	t.Helper()
	addr, _ := startReloadableServer(t, config)
	return addr
}

// startReloadableServer is startServer that also returns reload, which
// rewrites the server's configuration to config and has the server reload
// it (SIGHUP), waiting until it has.
func startReloadableServer(t testing.TB, config string) (addr string, reload func(config string)) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "server.conf")
	write := func(config string) {
		conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\nports_file_dir: %q\njetstream { store_dir: %q }\n%s\n",
			dir, filepath.Join(dir, "js"), config)
		require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	}
	write(config)
	bin, err := exec.LookPath("nats-server")
	require.NoError(t, err, "nats-server must be on PATH")
	cmd := exec.Command(bin, "-c", path)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	portsFile := filepath.Join(dir, fmt.Sprintf("%s_%d.ports", filepath.Base(bin), cmd.Process.Pid))
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(portsFile)
		if err != nil {
			return false
		}
		var ports struct{ Nats []string }
		if json.Unmarshal(b, &ports) != nil || len(ports.Nats) == 0 {
			return false
		}
		u, err := url.Parse(ports.Nats[0])
		if err != nil {
			return false
		}
		addr = u.Host
		return true
	}, 10*time.Second, 20*time.Millisecond, "nats-server did not start")
	reload = func(config string) {
		t.Helper()
		write(config)
		require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	}
	return addr, reload
}
