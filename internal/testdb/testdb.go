// Package testdb gives tests a real PostgreSQL: the server named by
// OUTBOX_TEST_DSN, else the local one on 127.0.0.1:5432, else a throwaway
// cluster started from the PostgreSQL binaries on the machine. Each test gets
// its own schema, dropped when it ends, so tests run in parallel.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxd/outbox/internal/pgcluster"
)

// DefaultDSN is the machine's local server, tried when OUTBOX_TEST_DSN is unset.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var (
	once    sync.Once
	dsn     string
	initErr error
	cluster *pgcluster.Cluster
	pool    *pgxpool.Pool
)

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn = os.Getenv("OUTBOX_TEST_DSN")
	if dsn == "" {
		dsn = DefaultDSN
		if !reachable(ctx, dsn) {
			cluster, initErr = pgcluster.Start(ctx, nil)
			if initErr != nil {
				initErr = fmt.Errorf("no PostgreSQL at %s and no throwaway cluster: %w", DefaultDSN, initErr)
				return
			}
			dsn = cluster.DSN
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		initErr = err
		return
	}
	cfg.MaxConns = 20
	// The suite's own sessions are told apart from the software's in
	// pg_stat_activity (the software sets application_name itself).
	cfg.ConnConfig.RuntimeParams["application_name"] = AppName
	pool, initErr = pgxpool.NewWithConfig(ctx, cfg)
}

func reachable(ctx context.Context, dsn string) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// AppName is the application_name of the sessions of [Pool].
const AppName = "outboxd-test-suite"

// DSN returns the test server's connection string.
func DSN(tb testing.TB) string {
	tb.Helper()
	once.Do(setup)
	require.NoError(tb, initErr)
	return dsn
}

// Pool returns the process-wide pool on the test server.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	DSN(tb)
	return pool
}

// NewPool returns a pool of its own (closed at the end of the test), for
// tests that need to control connections.
func NewPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(DSN(tb))
	require.NoError(tb, err)
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(p.Close)
	return p
}

// NewSchema creates an empty schema for this test and drops it afterwards.
func NewSchema(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	name := "t_" + randomName()
	_, err := p.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := p.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if err != nil {
			tb.Errorf("dropping test schema %s: %v", name, err)
		}
	})
	return name
}

// Main runs the tests, then closes the shared pool, stops any throwaway
// cluster and, when the tests passed, fails on leaked goroutines.
func Main(m *testing.M) {
	code := m.Run()
	if pool != nil {
		pool.Close()
	}
	if cluster != nil {
		_ = cluster.Stop(context.Background())
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// NewDatabase creates a database for this test alone, dropped (its
// sessions ended) when the test ends, and returns its connection string:
// the test server's, naming the new database.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	name := "outboxd_" + randomName()
	_, err := p.Exec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("dropping test database %s: %v", name, err)
		}
	})
	return withDatabase(tb, DSN(tb), name)
}

// withDatabase is dsn naming database db instead.
func withDatabase(tb testing.TB, dsn, db string) string {
	tb.Helper()
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String()
	}
	return dsn + " dbname=" + db // keyword/value: the last of a keyword counts
}

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
