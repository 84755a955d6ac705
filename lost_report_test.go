package outbox_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// A heartbeat races the finalize: a row finalized between the heartbeat's
// snapshot of its flights and its statement is not extended, and must not
// be reported as a lost lease. A trigger holds each finalize's row lock for
// half a heartbeat interval, so heartbeats keep landing in that window; one
// dispatcher and leases far from expiry make any report false.
func TestHeartbeatRaceReportsNoLostLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 10
	b.enqueueN(t, n, "a")
	fn := pgx.Identifier{b.schema, "slow_finalize"}.Sanitize()
	b.exec(t, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.1); RETURN NEW; END $$")
	b.exec(t, "CREATE TRIGGER slow_finalize BEFORE UPDATE ON "+b.quoted+
		" FOR EACH ROW WHEN (NEW.status = 'done') EXECUTE FUNCTION "+fn+"()")

	var hbLost atomic.Int64
	d := b.dispatcher(t, newRecorder(nil).Sink(), &outbox.Config{
		Workers: 1, BatchSize: 1, Lease: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		Hook: &lostHook{lost: &hbLost},
	})
	drain(t, d)
	st := d.Stats()
	require.Equal(t, int64(n), st.Done)
	require.Positive(t, st.Heartbeats)
	require.Zero(t, st.LeaseLost, "finalize reported lost leases")
	require.Zero(t, hbLost.Load(), "heartbeats reported lost leases that were only finalized")
}

type lostHook struct {
	outbox.BaseHook
	lost *atomic.Int64
}

func (h *lostHook) OnHeartbeat(ev outbox.HeartbeatEvent) { h.lost.Add(int64(ev.LeaseLost)) }

// A finalize whose commit landed but whose reply was lost with the
// connection is retried; the retry finds the rows already written, which
// is not a lost lease.
func TestFinalizeRetriedAfterLostReplyReportsNoLostLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 3, "a")

	cut := &replyCutter{marker: []byte("AS r(id, version, status, delay_us, refund, last_error, born, fenced)")}
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	// Exec mode sends every statement's text, so the cutter can see which
	// statement a reply belongs to.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return cut.wrap(c), nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	d, err := outbox.NewDispatcher(pool, newRecorder(nil).Sink(), &outbox.Config{
		Table: b.table, Logger: quietLogger(), BatchSize: 10, PollInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	drain(t, d)

	require.True(t, cut.fired.Load(), "no finalize reply was cut")
	st := d.Stats()
	require.GreaterOrEqual(t, st.Finalizes, int64(2), "the finalize was not retried")
	require.Equal(t, int64(len(ids)), st.Done)
	require.Zero(t, st.LeaseLost, "a finalize that landed was reported as a lost lease")
	for _, id := range ids {
		require.Equal(t, "done", b.row(t, id).Status)
	}
}

// replyCutter drops the connection that sends the first statement holding
// marker, once the server has answered it in full (so its commit is done)
// and before the client reads the answer.
type replyCutter struct {
	marker []byte
	armed  sync.Once
	fired  atomic.Bool
}

func (r *replyCutter) wrap(c net.Conn) net.Conn { return &cutConn{Conn: c, r: r} }

type cutConn struct {
	net.Conn
	r       *replyCutter
	cutting bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.r.marker) {
		c.r.armed.Do(func() { c.cutting = true })
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Read(p []byte) (int, error) {
	if !c.cutting {
		return c.Conn.Read(p)
	}
	// Swallow the server's answer up to its ReadyForQuery, then hang up.
	var buf []byte
	chunk := make([]byte, 4096)
	for !readyForQuery(buf) {
		n, err := c.Conn.Read(chunk)
		if err != nil {
			return 0, err
		}
		buf = append(buf, chunk[:n]...)
	}
	c.r.fired.Store(true)
	_ = c.Close()
	return 0, io.ErrUnexpectedEOF
}

// readyForQuery reports whether buf, a stream of backend messages, holds a
// complete ReadyForQuery ('Z').
func readyForQuery(buf []byte) bool {
	for len(buf) >= 5 {
		typ, size := buf[0], int(binary.BigEndian.Uint32(buf[1:5]))
		if len(buf) < 1+size {
			return false
		}
		if typ == 'Z' {
			return true
		}
		buf = buf[1+size:]
	}
	return false
}

// A claim whose commit landed but whose reply was lost with the connection
// (a failover, a cut link): its rows are processing under this dispatcher,
// which never heard of them. They are given back and delivered at once,
// not after their lease (a minute here, longer than the drain may take),
// with the attempt the lost claim spent refunded.
func TestClaimRetriedAfterLostReplyDeliversAtOnce(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		name := "Row"
		if ordered {
			name = "OrderedRow"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.enqueueN(t, 3, "a")
			cut := &replyCutter{marker: []byte("lease_version = o.lease_version + 1")}
			cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
			dial := cfg.ConnConfig.DialFunc
			cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return cut.wrap(c), nil
			}
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)

			rec := newRecorder(nil)
			d, err := outbox.NewDispatcher(pool, rec.Sink(), &outbox.Config{
				Table: b.table, Logger: quietLogger(), BatchSize: 10, PollInterval: 50 * time.Millisecond,
				Lease: time.Minute, Ordered: ordered,
			})
			require.NoError(t, err)
			drain(t, d)

			require.True(t, cut.fired.Load(), "no claim reply was cut")
			require.ElementsMatch(t, ids, rec.IDs(), "each message delivered once")
			for _, m := range rec.Messages() {
				require.Equal(t, 1, m.Attempt, "the lost claim's attempt was refunded")
			}
			for _, id := range ids {
				require.Equal(t, "done", b.row(t, id).Status)
			}
		})
	}
}
