package cli_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A second SIGTERM during a graceful shutdown exits at once, leaving the
// in-flight row to its lease.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := newCLI(t, bin)
	c.migrate(t)
	id := c.enqueue(t, "agg", `{"n":1}`)
	hook, arrived := hangingReceiver(t)
	p := start(t, bin, c.env, nil, "run", "--table", c.table, "--sink", hook, "--publish-timeout", "20s", "--lease", "60s")
	p.waitArrived(t, arrived)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// The first signal waits for the in-flight publish (up to 20s here).
	select {
	case err := <-p.exited:
		require.FailNow(t, "exited on the first signal while a publish was in flight", "%v\n%s", err, p.stderr.String())
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(5 * time.Second):
		require.FailNow(t, "a second SIGTERM did not stop outboxd", "stderr:\n%s", p.stderr.String())
	}
	r := p.wait()
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "second signal")
	require.Equal(t, "processing", c.statusOf(t, id), "the row keeps its lease until it expires")
}
