package cli_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// arrivals counts what a webhook receiver got, by path, with the time of
// each request.
type arrivals struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.at[r.URL.Path] = append(a.at[r.URL.Path], time.Now())
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (a *arrivals) times(path string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[path]...)
}

func TestFlowControlFlags(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)

	t.Run("ConfigCheckShowsTheLimits", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		file := filepath.Join(t.TempDir(), "outboxd.yaml")
		require.NoError(t, os.WriteFile(file, []byte(`sink: "stdout:"
sink-rate: 100/m
sink-concurrency: 4
routes:
  - {name: partner, event_type: "Payment*", sink: "stdout:", rate: 50, burst: 10}
  - {aggregate_type: customer, sink: "stdout:", concurrency: 2}
`), 0o600))
		r := c.run(t, "config", "check", "--config", file)
		requireOK(t, r)
		require.Contains(t, r.stdout, "1. partner: aggregate_type=* event_type=Payment* -> stdout: (rate 50/s, burst 10)")
		require.Contains(t, r.stdout, "2. route-2: aggregate_type=customer event_type=* -> stdout: (concurrency 2)")
		require.Regexp(t, `default -> stdout: \(rate 1\.66+7/s, burst 1, concurrency 4\)`, r.stdout)

		r = c.run(t, "config", "check", "--route", "name=partner,rate=5/s,event_type=Slow=stdout:", "--sink", "stdout:")
		requireOK(t, r)
		require.Contains(t, r.stdout, "1. partner: aggregate_type=* event_type=Slow -> stdout: (rate 5/s, burst 1)")
	})

	t.Run("BadLimitsAreOneLine", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		file := filepath.Join(t.TempDir(), "outboxd.yaml")
		require.NoError(t, os.WriteFile(file, []byte("routes:\n  - {event_type: A, sink: \"stdout:\", rate: fast}\n"), 0o600))
		for _, tc := range []struct {
			args []string
			says string
		}{
			{[]string{"--route", "rate=fast,event_type=A=stdout:"}, `rate "fast"`},
			{[]string{"--route", "concurrency=-2,event_type=A=stdout:"}, `concurrency "-2"`},
			{[]string{"--route", "rate=5/d,event_type=A=stdout:"}, `rate "5/d"`},
			{[]string{"--sink-rate", "-3"}, `rate "-3"`},
			{[]string{"--sink-burst", "3"}, "burst without a rate"},
			{[]string{"--sink-concurrency", "-1"}, "concurrency must not be negative"},
			{[]string{"--route", "name=p,rate=5,event_type=A=stdout:", "--route", "name=p,rate=6,event_type=B=stdout:"}, `"p"`},
			{[]string{"--config", file}, `rate "fast"`},
		} {
			r := c.run(t, append([]string{"config", "check"}, tc.args...)...)
			requireFailure(t, r, 2)
			require.Contains(t, r.stderr, tc.says, "%v", tc.args)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one error line: %s", r.stderr)
		}
	})

	// A receiver's route limited to 5 a second gets no more than its rate
	// and burst in any second, while the other route's messages, enqueued
	// behind, are all delivered first; the drain ends with every message
	// delivered once and no attempt spent.
	t.Run("RunKeepsTheRate", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		c.migrate(t)
		recv := &arrivals{at: map[string][]time.Time{}}
		srv := httptest.NewServer(recv)
		t.Cleanup(srv.Close)
		const slow, fast = 15, 100
		c.exec(t, fmt.Sprintf(`INSERT INTO %[1]s (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', 's' || i, 'Slow', '{}' FROM generate_series(1, %[2]d) i;
			INSERT INTO %[1]s (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', 'f' || i, 'Fast', '{}' FROM generate_series(1, %[3]d) i`, c.quoted(), slow, fast))
		r := c.run(t, "run", "--table", c.table, "--drain", "--workers", "8",
			"--route", "name=partner,rate=5,event_type=Slow="+srv.URL+"/slow", "--sink", srv.URL+"/fast")
		requireOK(t, r)
		slowAt, fastAt := recv.times("/slow"), recv.times("/fast")
		require.Len(t, slowAt, slow)
		require.Len(t, fastAt, fast)
		require.True(t, fastAt[fast-1].Before(slowAt[slow/2]), "the other route's messages were not held back behind the limited backlog")
		perSecond := map[int64]int{}
		for _, at := range slowAt {
			perSecond[at.Unix()]++
			require.LessOrEqual(t, perSecond[at.Unix()], 5+1, "the rate and its burst in one second")
		}
		var most int
		require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), "SELECT max(attempts) FROM "+c.quoted()+" WHERE status = 'done'").Scan(&most))
		require.Equal(t, 1, most, "no attempt spent waiting")
	})
}
