package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/service"
)

// Defaults of [Config].
const (
	SampleIntervalDefault    = 5 * time.Second
	SampleWindowDefault      = 720
	BreakdownIntervalDefault = 15 * time.Second
	RequestTimeoutDefault    = 10 * time.Second
	SignInBurstDefault       = 10
	SignInRefillDefault      = 6 * time.Second
	ExactCountTimeoutDefault = 150 * time.Millisecond
)

// Config configures a [Server].
type Config struct {
	// Tables are the outbox tables the console shows, NAME or SCHEMA.NAME. At
	// least one unless Dynamic; the first is the default.
	Tables []string
	// Dynamic lets tables come and go while the console runs
	// ([Server.AddTable], [Server.RemoveTable]), each with a database of
	// its own: Tables may be empty. Only the tables viewed (a page or an
	// API request naming them) within the last ten minutes are sampled, so
	// that a thousand tables do not cost a thousand reads every
	// SampleInterval; a table's charts start when it is first viewed.
	Dynamic bool
	// AllowedHosts are the names and addresses the console answers to (a
	// request's Host, its port aside); any other Host is answered 421, so
	// that a web page cannot rebind its name to the console's address and
	// read it through the operator's browser. Empty: any Host (the command
	// line always sets it, see AllowedHostsFor).
	AllowedHosts []string
	// TLS, when set, makes Serve answer HTTPS only, with this configuration
	// (its certificate read again when renewed, say: the command line's
	// --tls-cert). The session cookie is then Secure and every answer
	// carries Strict-Transport-Security.
	TLS *tls.Config
	// BehindTLSProxy says a proxy in front of the console terminates TLS:
	// browsers speak HTTPS to it, so the session cookie is Secure and
	// answers carry Strict-Transport-Security, as with TLS.
	BehindTLSProxy bool
	// Health, when set, says how the relay of each table is doing: "" when
	// healthy, else why not. The table picker and GET /api/v1/tables show
	// it.
	Health func(table string) string
	// Write enables the actions that change rows (dead retry and skip,
	// replay). Defaults to false: read-only, every write answers 403.
	Write bool
	// Credentials authenticate requests. Empty means no authentication, which
	// [New] accepts only for a read-only console (see Config.Insecure).
	Credentials Credentials
	// Insecure allows a console without credentials. The command line sets
	// it only for loopback addresses.
	Insecure bool
	// Logger receives the audit log lines and errors. Defaults to discarding.
	Logger *slog.Logger
	// SampleInterval is how often the sampler reads each table's gauges for
	// the charts. Defaults to 5s.
	SampleInterval time.Duration
	// SampleWindow is how many samples per table the charts keep (in
	// memory). Defaults to 720 (an hour at 5s).
	SampleWindow int
	// BreakdownInterval is how often the sampler re-reads each table's
	// breakdowns by event and aggregate type, which cost in proportion to
	// the rows not done. Defaults to 15s (never more often than
	// SampleInterval).
	BreakdownInterval time.Duration
	// RequestTimeout bounds every request's statements: when it passes, the
	// statement in flight is cancelled on the server and the request answers
	// 504 (code "timeout"). Tracked jobs are not bound by it. Defaults to 10s.
	RequestTimeout time.Duration
	// SignInBurst is how many sign-in attempts one client address may make
	// at once; past it the form answers 429 with Retry-After. Failed
	// Authorization headers (a wrong bearer token or basic auth) spend a
	// bucket of the same size of their own: past it every request of that
	// address with such a header answers 429, checked or not; a right
	// credential spends nothing. Defaults to 10.
	SignInBurst int
	// SignInRefill is how often one more attempt is allowed per address
	// once the burst is spent. Defaults to 6s (10 a minute).
	SignInRefill time.Duration
	// SearchWindow is how many rows a listing or count reads at most when
	// its filter has a term no index serves (created_at, error text, paths,
	// a column without an index on (column, id)); a page that does not fill
	// within it says so and offers to search further. Defaults to
	// outbox.SearchWindow (100,000).
	SearchWindow int
	// ExactCountTimeout bounds an exact count asked for (exact=1): past it
	// the server cancels the count and the answer is the bounded count,
	// marked exact_timed_out. Defaults to 150ms.
	ExactCountTimeout time.Duration
}

// https reports whether browsers reach the console over HTTPS.
func (c *Config) https() bool { return c.TLS != nil || c.BehindTLSProxy }

// Server is the console's HTTP handler, its sampler and its job registry.
type Server struct {
	cfg Config
	// mu guards tables and byName, which change under Dynamic.
	mu       sync.RWMutex
	tables   []*table
	byName   map[string]*table
	logger   *slog.Logger
	sessions *sessions
	jobs     *jobs
	handler  http.Handler
	signIn   *signInLimiter
	badAuth  *signInLimiter // failed Authorization headers, per address
}

// table is one outbox table the console serves.
type table struct {
	name       string
	admin      *outbox.Admin
	samples    *ring
	breakdowns breakdownCache
	// viewed is when a request last named the table (Unix nanoseconds).
	viewed atomic.Int64
}

// viewedFor is how long a table viewed is sampled under Config.Dynamic.
const viewedFor = 10 * time.Minute

// New returns a console over db for the configured tables.
func New(db outbox.DB, cfg *Config) (*Server, error) {
	if cfg == nil || len(cfg.Tables) == 0 && !cfg.Dynamic {
		return nil, errors.New("console: at least one table is required")
	}
	c := *cfg
	if c.SampleInterval <= 0 {
		c.SampleInterval = SampleIntervalDefault
	}
	if c.SampleWindow <= 0 {
		c.SampleWindow = SampleWindowDefault
	}
	if c.BreakdownInterval <= 0 {
		c.BreakdownInterval = BreakdownIntervalDefault
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = RequestTimeoutDefault
	}
	if c.SignInBurst <= 0 {
		c.SignInBurst = SignInBurstDefault
	}
	if c.SignInRefill <= 0 {
		c.SignInRefill = SignInRefillDefault
	}
	if c.SearchWindow <= 0 {
		c.SearchWindow = outbox.SearchWindow
	}
	if c.ExactCountTimeout <= 0 {
		c.ExactCountTimeout = ExactCountTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := c.Credentials.validate(); err != nil {
		return nil, err
	}
	if c.Credentials.empty() && (!c.Insecure || c.Write) {
		return nil, errors.New("console: credentials are required (set OUTBOXD_CONSOLE_TOKEN, or OUTBOXD_CONSOLE_USER and OUTBOXD_CONSOLE_PASSWORD); " +
			"only a read-only console on a loopback address may run without them")
	}
	s := &Server{cfg: c, byName: map[string]*table{}, logger: c.Logger, sessions: newSessions(), jobs: newJobs(),
		signIn: newSignInLimiter(c.SignInBurst, c.SignInRefill), badAuth: newSignInLimiter(c.SignInBurst, c.SignInRefill)}
	for _, name := range c.Tables {
		if err := s.AddTable(name, db); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes()
	return s, nil
}

// AllowedHostsFor is the default of Config.AllowedHosts for a console
// listening on addr: its host, localhost and the loopback addresses; for
// a wildcard address also the machine's name and every address of its
// interfaces; and extra.
func AllowedHostsFor(addr string, extra ...string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	out := []string{"localhost", "127.0.0.1", "::1"}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			out = append(out, name)
		}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					out = append(out, n.IP.String())
				}
			}
		}
	} else {
		out = append(out, host)
	}
	return append(out, extra...)
}

// AddTable serves one more table, read and written through db: under
// Config.Dynamic, while the console runs. A name served already is an
// error.
func (s *Server) AddTable(name string, db outbox.DB) error {
	a, err := outbox.NewAdmin(db, name)
	if err != nil {
		return fmt.Errorf("console: table %q: %w", name, err)
	}
	a.SetLogger(s.logger) // the library logs each write's audit line
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.byName[name]; dup {
		return fmt.Errorf("console: table %q given twice", name)
	}
	t := &table{name: name, admin: a, samples: newRing(s.cfg.SampleWindow)}
	s.tables = append(s.tables, t)
	s.byName[name] = t
	return nil
}

// RemoveTable stops serving a table; its pages answer 404 from then on.
func (s *Server) RemoveTable(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byName, name)
	s.tables = slices.DeleteFunc(s.tables, func(t *table) bool { return t.name == name })
}

// lookup returns the table named ("": the first), marked viewed, or nil.
func (s *Server) lookup(name string) *table {
	s.mu.RLock()
	t := s.byName[name]
	if name == "" && len(s.tables) > 0 {
		t = s.tables[0]
	}
	s.mu.RUnlock()
	if t != nil {
		t.viewed.Store(time.Now().UnixNano())
	}
	return t
}

// served returns the tables served now, in the order they were added.
func (s *Server) served() []*table {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.tables)
}

// health is the relay's word on a table: "" when healthy or unknown.
func (s *Server) health(name string) string {
	if s.cfg.Health == nil {
		return ""
	}
	return s.cfg.Health(name)
}

// Handler returns the console's HTTP handler (pages, assets and API).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve starts the sampler and serves the console on ln until ctx ends, then
// cancels the running jobs and shuts the server down.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan struct{})
	go func() { defer close(sampled); s.runSampler(ctx) }()
	// A quarter of the open-file limit, at most 256: the metrics listener,
	// the database and the sinks keep theirs under a flood.
	ln = service.LimitConns(ln, 4, 256)
	srv := service.HTTPServer(s.handler, s.logger)
	srv.TLSConfig = s.cfg.TLS
	errc := make(chan error, 1)
	go func() { errc <- service.Serve(srv, ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	s.jobs.cancelAll()
	shutCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutCtx)
	s.jobs.wait()
	<-sampled
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
