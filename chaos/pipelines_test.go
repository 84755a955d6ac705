//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox"
)

// The random runs relay one slot's table through a config file of
// pipelines: the slot's process runs `outboxd run --config FILE` with two
// pipelines, its group's table and a pattern over side tables of the run's
// schema (one more created while the faults go on, picked up by
// discovery), under every fault the slot meets. Its group is checked as
// every group is; the side tables are checked for what a pipeline must
// never do: a message left undelivered, or done without a delivery.

// sideGroup is the sink path and pipeline name of the side tables.
const sideGroup = "side"

// side is a run's side tables and their producer.
type side struct {
	r      *run
	mu     sync.Mutex
	tables []string // schema-qualified, in creation order
	// later is created once the producer has written this many rows.
	later     string
	laterFrom int
}

// newSide creates the side tables of r (side_1, side_2; side_3 later).
func newSide(ctx context.Context, r *run) (*side, error) {
	s := &side{r: r, later: r.schema + ".side_3", laterFrom: 100}
	for _, t := range []string{r.schema + ".side_1", r.schema + ".side_2"} {
		if err := s.create(ctx, t); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *side) create(ctx context.Context, table string) error {
	a, err := outbox.NewAdmin(s.r.env.admin, table)
	if err != nil {
		return err
	}
	if err := a.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", table, err)
	}
	s.mu.Lock()
	s.tables = append(s.tables, table)
	s.mu.Unlock()
	return nil
}

func (s *side) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tables)
}

// file writes the pipelines file of an incarnation of slot sl and returns
// its path: the group's table under the flags' settings, and the side
// tables, unordered on row leases, to their own sink path.
func (s *side) file(sl *slot, owner, sinkBase string) (string, error) {
	body := fmt.Sprintf(`discover-interval: 1s
pipelines:
  - {name: %s, table: %s}
  - {name: %s, table: "%s.side_*", lease-mode: row, ordered: false, sink: "%s/deliver/%s/%s"}
`, sl.g.name, sl.g.table, sideGroup, s.r.schema, sinkBase, sideGroup, owner)
	path := filepath.Join(s.r.dir, "logs", owner+".pipelines.yaml")
	return path, os.WriteFile(path, []byte(body), 0o644)
}

// produce inserts one message into each side table every interval until
// ctx ends; after laterFrom rows it creates the last side table.
func (s *side) produce(ctx context.Context, interval time.Duration) {
	n := 0
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n >= s.laterFrom && s.later != "" {
			if err := s.create(ctx, s.later); err != nil && ctx.Err() == nil {
				s.r.t.Errorf("side table: %v", err)
			}
			s.later = ""
		}
		for _, table := range s.list() {
			schema, name, _ := strings.Cut(table, ".")
			_, err := s.r.env.admin.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, name}.Sanitize()+
				" (aggregate_type, aggregate_id, event_type, payload) VALUES ('side', $1, 'SideEvent', '{}')", fmt.Sprint(n%7))
			if err == nil {
				n++
			}
		}
	}
}

// undelivered counts the side messages not done.
func (s *side) undelivered(ctx context.Context) (int, error) {
	left := 0
	for _, table := range s.list() {
		schema, name, _ := strings.Cut(table, ".")
		var n int
		if err := s.r.env.admin.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, name}.Sanitize()+
			" WHERE status <> 'done'").Scan(&n); err != nil {
			return 0, err
		}
		left += n
	}
	return left, nil
}

// check counts the side messages lost: not done, or done and never
// acknowledged by the sink under their identity (pattern's pipeline name,
// table and uid).
func (s *side) check(ctx context.Context, dels []delivery) (lost, rows int, examples []string, err error) {
	acked := map[string]bool{}
	for _, d := range dels {
		if d.Group == sideGroup && !d.Acked.IsZero() {
			acked[d.Key] = true
		}
	}
	for _, table := range s.list() {
		schema, name, _ := strings.Cut(table, ".")
		q, err := s.r.env.admin.Query(ctx, "SELECT id, status, uid::text FROM "+pgx.Identifier{schema, name}.Sanitize())
		if err != nil {
			return 0, 0, nil, err
		}
		type row struct {
			ID          int64
			Status, UID string
		}
		got, err := pgx.CollectRows(q, pgx.RowToStructByPos[row])
		if err != nil {
			return 0, 0, nil, err
		}
		for _, r := range got {
			rows++
			key := sideGroup + "." + table + ":" + r.UID
			if r.Status != "done" || !acked[key] {
				lost++
				if len(examples) < 8 {
					examples = append(examples, fmt.Sprintf("%s id %d: status %s, acknowledged under %s: %v", table, r.ID, r.Status, key, acked[key]))
				}
			}
		}
	}
	return lost, rows, examples, nil
}
