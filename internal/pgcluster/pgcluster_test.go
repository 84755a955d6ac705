package pgcluster

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks that nothing (the helper, pgx) leaves goroutines behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := FindBinDir()
	require.NoError(t, err)
	require.NoError(t, checkBinDir(dir))
	t.Logf("FindBinDir: %s", dir)
}

func connect(ctx context.Context, t *testing.T, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func requireRow(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	conn := connect(ctx, t, c)
	var v string
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM survivor WHERE id = 1").Scan(&v))
	require.Equal(t, "still here", v)
	require.NoError(t, conn.Close(ctx))
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := Start(ctx, &Options{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.DirExists(t, c.DataDir)
	require.NotZero(t, c.Port)
	require.True(t, c.Running())
	t.Logf("DSN: %s", c.DSN)
	if os.Geteuid() == 0 {
		require.Contains(t, []string{"postgres", "nobody"}, c.User)
	}

	conn := connect(ctx, t, c)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	var user, fsync, enc, maxConns string
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT current_user, current_setting('fsync'), current_setting('server_encoding'), current_setting('max_connections')").
		Scan(&user, &fsync, &enc, &maxConns))
	require.Equal(t, c.User, user)
	require.Equal(t, "off", fsync)
	require.Equal(t, "UTF8", enc)
	require.Equal(t, "200", maxConns)
	_, err = conn.Exec(ctx, "CREATE TABLE survivor (id int PRIMARY KEY, v text NOT NULL)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO survivor VALUES (1, 'still here')")
	require.NoError(t, err)

	// Crash-restart: the committed row survives recovery; the old
	// connection is gone.
	port := c.Port
	require.NoError(t, c.Restart(ctx, "immediate"))
	require.Equal(t, port, c.Port)
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err)
	requireRow(ctx, t, c)

	// Kill: open connections break and new ones are refused.
	conn2 := connect(ctx, t, c)
	require.NoError(t, c.Kill())
	require.False(t, c.Running())
	_, err = conn2.Exec(ctx, "SELECT 1")
	require.Error(t, err)
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = pgx.Connect(cctx, c.DSN)
	ccancel()
	require.Error(t, err)
	require.Error(t, c.Kill(), "Kill of a dead server")

	require.NoError(t, c.StartAgain(ctx))
	require.True(t, c.Running())
	require.NoError(t, c.StartAgain(ctx), "StartAgain of a running server is a no-op")
	requireRow(ctx, t, c)

	require.NoError(t, c.Stop(ctx))
	require.NoDirExists(t, c.DataDir)
	require.NoDirExists(t, c.SocketDir)
	require.False(t, c.Running())
	require.NoError(t, c.Stop(ctx), "Stop is idempotent")
	require.Error(t, c.StartAgain(ctx))
	require.Error(t, c.Restart(ctx, "fast"))
}

func TestStopAfterKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := Start(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.Error(t, c.Restart(ctx, "bogus"))
	require.NoError(t, c.Restart(ctx, "fast"))
	require.NoError(t, c.Kill())
	require.NoError(t, c.Restart(ctx, "immediate"), "Restart after Kill starts the server")
	require.True(t, c.Running())
	require.NoError(t, c.Kill())
	require.NoError(t, c.Stop(ctx))
	require.NoDirExists(t, c.DataDir)
}

func TestStartPortTaken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()

	c, err := Start(ctx, &Options{Port: l.Addr().(*net.TCPAddr).Port})
	if c != nil {
		_ = c.Stop(ctx)
	}
	require.Error(t, err)
	require.Nil(t, c)
	require.Contains(t, err.Error(), "server log tail")
	require.Contains(t, err.Error(), "could not bind")
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	c, err := Start(canceled, nil)
	require.Error(t, err)
	require.Nil(t, c)

	ctx, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	c, err = Start(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	// pg_ctl cannot run with a done context: Stop falls back to killing
	// the server, still removes everything and reports the context error.
	err = c.Stop(canceled)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, c.Running())
	require.NoDirExists(t, c.DataDir)
	require.NoError(t, c.Stop(ctx))
}
