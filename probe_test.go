package outbox_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// lockedBuffer collects log output written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const probeWarning = "notifications do not arrive"

// TestListenerProbe: at start the listener notifies its own channel from
// another session and waits for it. On a direct connection it arrives and
// nothing is said; when it cannot arrive (as behind a transaction pooler;
// here the dispatcher's sessions find a pg_notify that does nothing first on
// their search_path) one warning says the relay polls, and delivery goes on.
func TestListenerProbe(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		lost    bool
		message string
	}{
		{"Arrives", false, "notification probe arrived"},
		{"NeverArrives", true, probeWarning},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			rec := newRecorder(nil)
			cfg := &outbox.Config{Logger: logger, PollInterval: 200 * time.Millisecond}
			var d *outbox.Dispatcher
			if tt.lost {
				d = lostNotifications(t, b, rec.Sink(), cfg)
			} else {
				d = b.dispatcher(t, rec.Sink(), cfg)
			}
			start(t, d)
			eventually(t, func() bool { return strings.Contains(logs.String(), tt.message) }, tt.message)
			ids := b.enqueueN(t, 2, "a")
			rec.waitLen(t, 2, 10*time.Second)
			require.Equal(t, 2, rec.Len())
			require.ElementsMatch(t, ids, rec.IDs())
			require.Equal(t, map[bool]int{false: 0, true: 1}[tt.lost], strings.Count(logs.String(), probeWarning), "%s", logs.String())
			if tt.lost {
				require.Contains(t, logs.String(), "falls back to polling every poll interval")
				require.Contains(t, logs.String(), "--no-notify")
			}
		})
	}
}

// lostNotifications returns a dispatcher on b's table whose sessions lose
// every notification they send: a pg_notify of b's schema that does
// nothing comes before pg_catalog's on their search_path.
func lostNotifications(t *testing.T, b *testBundle, sink outbox.Sink, cfg *outbox.Config) *outbox.Dispatcher {
	t.Helper()
	schema := pgx.Identifier{b.schema}.Sanitize()
	b.exec(t, "CREATE FUNCTION "+schema+".pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$")
	pc, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["search_path"] = schema + ", pg_catalog"
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.Table = b.table
	d, err := outbox.NewDispatcher(pool, sink, cfg)
	require.NoError(t, err)
	return d
}
