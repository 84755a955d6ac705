package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
)

// dbFlags are the connection options every command takes.
type dbFlags struct {
	dsn    string
	table  string
	config string
	// appName is the application_name the sessions report unless the DSN
	// or PGAPPNAME names one. Defaults to appNameDefault.
	appName string
	// pipelines are those of the config file, if it has any; tableGiven
	// tells whether --table (or its variable) named a table all the same.
	pipelines  []pipelineSpec
	tableGiven bool
}

// oneTable refuses a command on one table when the config file has
// pipelines and no table was named: the default table would be a guess.
func (d *dbFlags) oneTable() error {
	if len(d.pipelines) > 0 && !d.tableGiven {
		return usagef("--config %s has pipelines: name the table with --table (SCHEMA.NAME)", d.config)
	}
	return nil
}

// appNameDefault is the application_name of outboxd's sessions, so that
// pg_stat_activity and the server's log name them.
const appNameDefault = "outboxd"

func (d *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.dsn, "dsn", "", "PostgreSQL connection string (default $OUTBOX_DSN, else the libpq environment)")
	fs.StringVar(&d.table, "table", outbox.TableDefault, "outbox table, NAME or SCHEMA.NAME")
	setsField(fs, "table", "Table")
	fs.StringVar(&d.config, "config", "", "YAML config file (default $OUTBOXD_CONFIG); flags and OUTBOXD_* variables override it")
}

// resolveDSN applies the precedence --dsn > $OUTBOX_DSN > libpq environment
// (an empty string, which pgx completes from PGHOST, PGUSER, ...).
func (d *dbFlags) resolveDSN(e *env) string {
	if d.dsn != "" {
		return d.dsn
	}
	return e.getenv("OUTBOX_DSN")
}

// poolConfig parses the connection string as connect does, without
// connecting: a string that does not parse is a usage error, its text
// scrubbed of the value.
func (d *dbFlags) poolConfig(e *env) (*pgxpool.Config, error) {
	dsn := d.resolveDSN(e)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("invalid DSN: %s", dsnErrText(err, dsn))
	}
	return cfg, nil
}

// connect opens a pool and checks that the server answers. Errors never
// contain the password.
func (d *dbFlags) connect(ctx context.Context, e *env, maxConns int32) (*pgxpool.Pool, error) {
	return d.connectWith(ctx, e, func(cfg *pgxpool.Config) {
		if maxConns > 0 {
			cfg.MaxConns = maxConns
		}
	})
}

// connectWith is connect with the pool's settings made by tune.
func (d *dbFlags) connectWith(ctx context.Context, e *env, tune func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	dsn := d.resolveDSN(e)
	cfg, err := d.poolConfig(e)
	if err != nil {
		return nil, err
	}
	password := cfg.ConnConfig.Password
	// pgconn has put application_name there if the DSN or PGAPPNAME set it.
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = cmp.Or(d.appName, appNameDefault)
	}
	tune(cfg)
	cfg.ConnConfig.ConnectTimeout = cmpDuration(cfg.ConnConfig.ConnectTimeout, 10*time.Second)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %s", scrubDSN(err.Error(), dsn, password))
	}
	pingCtx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL: %s", scrubDSN(describeConnErr(err), dsn, password))
	}
	return pool, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func describeConnErr(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	return err.Error()
}

// admin connects and returns an Admin for the table.
func (d *dbFlags) admin(ctx context.Context, e *env) (*outbox.Admin, *pgxpool.Pool, error) {
	if err := d.oneTable(); err != nil {
		return nil, nil, err
	}
	if _, err := outbox.NewAdmin(nil, d.table); err != nil {
		return nil, nil, usagef("--table: %v", err)
	}
	pool, err := d.connect(ctx, e, 4)
	if err != nil {
		return nil, nil, err
	}
	a, _ := outbox.NewAdmin(pool, d.table)
	return a, pool, nil
}

// flagGroup is a set of flags several commands take (logFlags, filterFlags).
type flagGroup interface{ register(fs *flag.FlagSet) }

// dbCommand is a command on one outbox table as it is being defined and
// read: its flag set, holding the database flags (--dsn, --table, --config)
// and the groups it was made with, and read through the configuration
// layers (flags, environment, file).
type dbCommand struct {
	*flag.FlagSet
	db dbFlags
}

func newDBCommand(e *env, name, synopsis string, groups ...flagGroup) *dbCommand {
	c := &dbCommand{FlagSet: newFlagSet(e, name, synopsis)}
	c.db.register(c.FlagSet)
	for _, g := range groups {
		g.register(c.FlagSet)
	}
	return c
}

// parse reads args and the layers under them; a positional argument is an
// error.
func (c *dbCommand) parse(e *env, args []string) error {
	if err := c.parseWithArgs(e, args); err != nil {
		return err
	}
	return noArgs(c.FlagSet)
}

// parseWithArgs is parse for a command that takes positional arguments
// (fs.Args).
func (c *dbCommand) parseWithArgs(e *env, args []string) error {
	return parseLayered(e, c.FlagSet, &c.db, args)
}

// withAdmin connects, runs f with the table's Admin, then closes the pool.
func (c *dbCommand) withAdmin(ctx context.Context, e *env, f func(a *outbox.Admin) error) error {
	a, pool, err := c.db.admin(ctx, e)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(a)
}

// parseDuration is time.ParseDuration that also takes whole days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n >= 0 && n < 100000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (examples: 30s, 5m, 36h, 7d)", s)
	}
	return d, nil
}

// durationFlag is a flag.Value for parseDuration.
type durationFlag struct {
	d   *time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f *durationFlag) Type() string { return "duration" }

func (f *durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err == nil {
		*f.d, f.set = d, true
	}
	return err
}

func durVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) *durationFlag {
	*p = def
	f := &durationFlag{d: p}
	fs.Var(f, name, usage)
	return f
}
