package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// StandbyOptions configures StartStandby. The zero value is valid.
type StandbyOptions struct {
	// Synchronous makes the primary wait, for every commit, until the
	// standby has written it (synchronous_standby_names = '*' on the
	// primary, reloaded): a commit acknowledged by the primary survives
	// its loss. Default: asynchronous streaming, as after pg_basebackup -R,
	// where the last commits of a primary that dies can be missing on the
	// standby.
	Synchronous bool
}

// StartStandby creates a streaming standby of c, which must be running:
// pg_basebackup -R from c into a new temporary directory, started on a
// port of its own with c's settings. It returns once the standby accepts
// (read-only) connections and streams from c, and if it is synchronous,
// once it holds everything c committed before. Stop the standby as any
// cluster; Promote makes it a primary.
func (c *Cluster) StartStandby(ctx context.Context, opts *StandbyOptions) (*Cluster, error) {
	if opts == nil {
		opts = &StandbyOptions{}
	}
	c.mu.Lock()
	removed := c.removed
	c.mu.Unlock()
	if removed {
		return nil, errors.New("pgcluster: cluster was stopped and removed")
	}
	s, err := newCluster("pgcluster-standby-", c.User, c.BinDir, c.cred, c.logf, c.async)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.mu.Lock()
			_ = s.destroyLocked(context.WithoutCancel(ctx))
			s.mu.Unlock()
		}
	}()

	s.logf("pgcluster: pg_basebackup of port %d into %s", c.Port, s.DataDir)
	out, err := s.run(ctx, "pg_basebackup", "-D", s.DataDir, "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port),
		"-U", c.User, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: pg_basebackup: %w\n%s", err, tail(out, logTailLines))
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.setPort(port)
	// The copy holds the primary's settings file, port and socket
	// directory included: write the standby's own.
	if err := s.writeConf(); err != nil {
		return nil, err
	}
	if err := s.startLocked(ctx, "start"); err != nil {
		return nil, err
	}
	state := "async"
	if opts.Synchronous {
		// Set after the copy, so the standby, once promoted, does not wait
		// for a synchronous standby of its own.
		state = "sync"
		if err := c.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	if err := s.waitStreaming(ctx, c, state); err != nil {
		return nil, err
	}
	if opts.Synchronous {
		// A commit now waits for the standby to have written all WAL up to
		// it, so everything committed before, while the standby was still
		// asynchronous, is on the standby too once this returns.
		if err := c.exec(ctx, "SELECT txid_current()"); err != nil {
			return nil, err
		}
	}
	ok = true
	s.logf("pgcluster: standby of port %d started on 127.0.0.1:%d", c.Port, s.Port)
	return s, nil
}

// Promote ends recovery on a standby (pg_ctl promote -w): it becomes a
// primary that accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errors.New("pgcluster: cluster was stopped and removed")
	}
	c.logf("pgcluster: promoting server on port %d", c.Port)
	out, err := c.run(ctx, "pg_ctl", "promote", "-D", c.DataDir, "-w", "-t", strconv.Itoa(pgCtlTimeoutSec))
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl promote (port %d): %w: %s", c.Port, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// HoldReplication stops the primary's WAL senders (SIGSTOP) until resume
// is called: what the primary commits meanwhile does not reach its
// standbys, as with a standby that lags, and dies with the primary if it
// is killed meanwhile. (Stopping the standby's receiver instead would not
// do: what the kernel had already received reaches it once it continues.)
// Under synchronous replication the primary's commits wait meanwhile.
func (c *Cluster) HoldReplication(ctx context.Context) (resume func() error, err error) {
	conn, err := pgconn.Connect(ctx, c.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: connect to port %d: %w", c.Port, err)
	}
	res := conn.ExecParams(ctx, "SELECT pid FROM pg_stat_replication", nil, nil, nil, nil).Read()
	_ = conn.Close(ctx)
	if res.Err != nil {
		return nil, fmt.Errorf("pgcluster: WAL senders on port %d: %w", c.Port, res.Err)
	}
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("pgcluster: no WAL sender on port %d", c.Port)
	}
	var pids []int
	for _, row := range res.Rows {
		pid, err := strconv.Atoi(string(row[0]))
		if err != nil {
			return nil, fmt.Errorf("pgcluster: WAL sender pid %q: %w", row[0], err)
		}
		pids = append(pids, pid)
	}
	c.logf("pgcluster: holding replication from port %d (WAL senders %v stopped)", c.Port, pids)
	resume = func() error {
		c.logf("pgcluster: resuming replication from port %d", c.Port)
		var errs []error
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("pgcluster: continue WAL sender %d: %w", pid, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, errors.Join(fmt.Errorf("pgcluster: stop WAL sender %d: %w", pid, err), resume())
		}
	}
	return resume, nil
}

// waitStreaming waits until primary lists a streaming replication
// connection in sync state state ("async" or "sync").
func (c *Cluster) waitStreaming(ctx context.Context, primary *Cluster, state string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conn, err := pgconn.Connect(ctx, primary.DSN)
		if err == nil {
			res := conn.ExecParams(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1",
				[][]byte{[]byte(state)}, nil, nil, nil).Read()
			_ = conn.Close(ctx)
			if res.Err == nil && len(res.Rows) == 1 && string(res.Rows[0][0]) != "0" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: standby on port %d does not stream from port %d: %w\nstandby log tail:\n%s",
				c.Port, primary.Port, ctx.Err(), c.LogTail(logTailLines))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// exec runs statements on the server, one at a time.
func (c *Cluster) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgconn.Connect(ctx, c.DSN)
	if err != nil {
		return fmt.Errorf("pgcluster: connect to port %d: %w", c.Port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // a close error changes nothing here
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q).ReadAll(); err != nil {
			return fmt.Errorf("pgcluster: %s on port %d: %w", q, c.Port, err)
		}
	}
	return nil
}
