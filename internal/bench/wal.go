package bench

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cost reads what a drain costs beyond its time: the WAL the server wrote
// and the CPU the relay and, on this machine, the server used, from its
// start to its end.
type cost struct {
	pool    *pgxpool.Pool
	table   *benchTable
	walFrom string // "" when the WAL position cannot be read (a standby, a pooler)
	cpuFrom time.Duration
	// serverFrom is the server's processes' CPU at the start; nil when
	// the server is not on this machine.
	serverFrom map[int]time.Duration
}

func startCost(ctx context.Context, pool *pgxpool.Pool, t *benchTable) *cost {
	c := &cost{pool: pool, table: t, cpuFrom: processCPU()}
	if localServer(pool) {
		if cpu, ok := serverCPU(); ok {
			c.serverFrom = cpu
		}
	}
	_ = pool.QueryRow(ctx, t.sql("wal_position.sql")).Scan(&c.walFrom)
	return c
}

// checkpoint starts the drain's table on a fresh checkpoint, so that the
// drain does not straddle one: the first write of each page after a
// checkpoint logs the whole page, and a checkpoint that happens to fall
// inside a two-second drain added up to a third to its WAL per message,
// one run in three. Without the privilege (superuser or pg_checkpoint)
// the figure may include such pages, and the bench says so.
func (b *Benchmarker) checkpoint(ctx context.Context) {
	if _, err := b.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(b.cfg.Stderr, "  no CHECKPOINT before the drain (%v): WAL/msg may include full-page images\n", err)
	}
}

// report prints the WAL and the relay's CPU per message of n delivered.
func (c *cost) report(ctx context.Context, print func(format string, args ...any), n int) {
	cpu := processCPU() - c.cpuFrom
	wal := "n/a"
	var to string
	var bytes int64
	if c.walFrom != "" && c.pool.QueryRow(ctx, c.table.sql("wal_position.sql")).Scan(&to) == nil &&
		c.pool.QueryRow(ctx, c.table.sql("wal_bytes.sql"), c.walFrom, to).Scan(&bytes) == nil {
		wal = fmt.Sprintf("%.0f B", float64(bytes)/float64(max(n, 1)))
	}
	print("WAL/msg          %s (the whole server's, while the drain ran)\n", wal)
	print("relay CPU/msg    %.1f µs\n", float64(cpu.Microseconds())/float64(max(n, 1)))
	server := "n/a (the server is not on this machine)"
	if c.serverFrom != nil {
		if d, ok := serverCPUSince(c.serverFrom); ok {
			server = fmt.Sprintf("%.1f µs (every postgres process of this machine, while the drain ran)", float64(d.Microseconds())/float64(max(n, 1)))
		}
	}
	print("server CPU/msg   %s\n", server)
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
