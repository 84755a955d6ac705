//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox"
)

// shardAcq is one shard lease taken: a change of a shard row's token.
type shardAcq struct {
	seq   int64
	shard int
	token int64
	owner string
	at    time.Time
}

// enableShards gives g's table its shards and audits their takeovers, in
// the same sequence as the table's own audit trail, so the checker can
// tell which token was current at each write.
func (r *run) enableShards(ctx context.Context, g *group) error {
	admin, err := outbox.NewAdmin(r.env.admin, g.table)
	if err != nil {
		return err
	}
	if err := admin.EnableShards(ctx, shardCount); err != nil {
		return err
	}
	s := pgx.Identifier{r.schema}.Sanitize()
	shards := s + "." + pgx.Identifier{g.name + "_shards"}.Sanitize()
	a := s + "." + pgx.Identifier{g.name + "_chaos_shard_audit"}.Sanitize()
	fn := s + "." + pgx.Identifier{g.name + "_chaos_shard_audit_fn"}.Sanitize()
	var seq string
	if err := r.env.admin.QueryRow(ctx, "SELECT pg_get_serial_sequence($1, 'seq')", g.audit).Scan(&seq); err != nil {
		return err
	}
	q := `
CREATE TABLE ` + a + ` (
    seq   bigint PRIMARY KEY DEFAULT nextval('` + seq + `'),
    at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    app   text NOT NULL DEFAULT current_setting('application_name'),
    shard integer NOT NULL,
    owner text,
    token bigint NOT NULL
);
CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $chaos$
BEGIN
    INSERT INTO ` + a + ` (shard, owner, token) VALUES (NEW.shard, NEW.owner, NEW.token);
    RETURN NULL;
END
$chaos$;
CREATE TRIGGER chaos_shard_audit AFTER UPDATE ON ` + shards + ` FOR EACH ROW
    WHEN (OLD.token IS DISTINCT FROM NEW.token)
    EXECUTE FUNCTION ` + fn + `();`
	_, err = r.env.admin.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
	return err
}

func (r *run) loadShardAudit(ctx context.Context, g *group) ([]shardAcq, error) {
	a := pgx.Identifier{r.schema, g.name + "_chaos_shard_audit"}.Sanitize()
	rows, err := r.env.admin.Query(ctx, `SELECT seq, shard, token, coalesce(owner, ''), at FROM `+a+` ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (shardAcq, error) {
		var s shardAcq
		err := row.Scan(&s.seq, &s.shard, &s.token, &s.owner, &s.at)
		return s, err
	})
}

// shardAuditChecks checks the audit trail of a table relayed under shard
// leases, where no claim is written: every write of a row was made by the
// owner of the shard token it stamps, while that token was the shard's
// current one, to a row still pending; every done was acknowledged to
// that owner under that token; every delivery carries a token its shard
// had. The shard takeovers stand in for claims in claimOf (for the
// duplicate check); failed and doneSeq are filled as under row leases.
func shardAuditChecks(c *counts, acqs []shardAcq, rows map[int64]rowState, audit []auditRec, dels []delivery,
	acked map[leaseKey]map[string]bool, byID map[int64][]delivery, claimOf map[leaseKey]auditRec,
	failed map[leaseKey]string, doneSeq map[int64]int64, cfg runConfig) {
	byShard := map[int][]shardAcq{}
	for _, a := range acqs {
		byShard[a.shard] = append(byShard[a.shard], a)
		c.Claims++
	}
	// took finds the takeover that gave shard its token, and the seq of
	// the next takeover of that shard (MaxInt64 if none).
	took := func(shard int, token int64) (shardAcq, int64, bool) {
		list := byShard[shard]
		for i, a := range list {
			if a.token == token {
				next := int64(1<<63 - 1)
				if i+1 < len(list) {
					next = list[i+1].seq
				}
				return a, next, true
			}
		}
		return shardAcq{}, 0, false
	}
	for _, d := range dels {
		row, ok := rows[d.ID]
		if !ok {
			continue // a phantom: counted there
		}
		a, _, ok := took(row.shard, d.Token)
		if !ok {
			c.AuditAnomalies++
			c.example("audit_anomalies", "id %d delivered by %s under token %d, which shard %d never had", d.ID, d.Path, d.Token, row.shard)
			continue
		}
		claimOf[leaseKey{d.ID, d.Token}] = auditRec{seq: a.seq, id: d.ID, at: a.at, app: a.owner, newVersion: d.Token, newOwner: a.owner}
	}
	for _, w := range audit {
		shard := rows[w.id].shard
		a, next, ok := took(shard, w.newVersion)
		switch {
		case w.oldStatus != "pending":
			c.StaleFinalize++
			c.example("stale_finalize", "write to %d by %s: %s -> %s (a row not pending)", w.id, w.app, w.oldStatus, w.newStatus)
			continue
		case !ok || a.owner != w.app || w.seq < a.seq || w.seq > next:
			c.StaleFinalize++
			c.example("stale_finalize", "write of %d (%s) by %s under token %d of shard %d, held by %q from seq %d to %d (write at %d)",
				w.id, w.newStatus, w.app, w.newVersion, shard, a.owner, a.seq, next, w.seq)
			continue
		}
		k := leaseKey{w.id, w.newVersion}
		if w.newStatus != "done" {
			failed[k] = w.app
		}
		switch w.newStatus {
		case "done":
			if _, seen := doneSeq[w.id]; !seen {
				doneSeq[w.id] = w.seq
			}
			// The takeover stands in for the claim: a publish JetStream
			// dropped as a duplicate stored nothing, so no delivery
			// names this token.
			taken := auditRec{seq: a.seq, id: w.id, at: a.at, app: a.owner, newVersion: w.newVersion}
			if !acked[k][w.app] && !dedupedAck(cfg, byID[w.id], w.newVersion, taken) {
				c.StaleFinalize++
				c.example("stale_finalize", "done of %d by %s under token %d, but the sink never acknowledged that token to it", w.id, w.app, w.newVersion)
			}
		case "pending":
			c.Retried++
		case "dead":
			if strings.HasPrefix(w.lastError, "lease expired after max attempts") {
				c.Reaped++
			}
		}
	}
	// Deliveries by an owner while another held the token cannot happen:
	// a token names one takeover. Report the shards' takeovers in order.
	for shard, list := range byShard {
		if !sort.SliceIsSorted(list, func(i, j int) bool { return list[i].token < list[j].token }) {
			c.AuditAnomalies++
			c.example("audit_anomalies", "shard %d's tokens went backwards: %v", shard, fmt.Sprint(list))
		}
	}
}

// cursorMove is a move of a shard's snapshot cursor: its done snapshot or
// open window written, by app, the shard row then naming owner and token.
type cursorMove struct {
	seq   int64
	shard int
	token int64
	owner string
	app   string
}

// enableCursors gives g's table snapshot cursors (its shards are enabled)
// and audits what the relay writes under them, in the sequence of the
// table's own audit trail: every move of a cursor and every write of a
// parked message. The rows themselves are never written; their status is
// read through a view that derives it as the relay does: parked (pending
// or dead), else done once its shard's cursor passed it (visible in the
// done snapshot, or in the open window up to its last id), else pending.
func (r *run) enableCursors(ctx context.Context, g *group) error {
	admin, err := outbox.NewAdmin(r.env.admin, g.table)
	if err != nil {
		return err
	}
	if err := admin.EnableCursors(ctx); err != nil {
		return err
	}
	s := pgx.Identifier{r.schema}.Sanitize()
	name := func(suffix string) string { return s + "." + pgx.Identifier{g.name + suffix}.Sanitize() }
	var seq string
	if err := r.env.admin.QueryRow(ctx, "SELECT pg_get_serial_sequence($1, 'seq')", g.audit).Scan(&seq); err != nil {
		return err
	}
	q := `
CREATE TABLE ` + name("_chaos_cursor_audit") + ` (
    seq   bigint PRIMARY KEY DEFAULT nextval('` + seq + `'),
    app   text NOT NULL DEFAULT current_setting('application_name'),
    shard integer NOT NULL,
    owner text,
    token bigint NOT NULL
);
CREATE FUNCTION ` + name("_chaos_cursor_audit_fn") + `() RETURNS trigger LANGUAGE plpgsql AS $chaos$
BEGIN
    INSERT INTO ` + name("_chaos_cursor_audit") + ` (shard, owner, token) VALUES (NEW.shard, NEW.owner, NEW.token);
    RETURN NULL;
END
$chaos$;
CREATE TRIGGER chaos_cursor_audit AFTER UPDATE ON ` + name("_shards") + ` FOR EACH ROW
    WHEN (OLD.done::text IS DISTINCT FROM NEW.done::text OR OLD.win::text IS DISTINCT FROM NEW.win::text
          OR OLD.win_last IS DISTINCT FROM NEW.win_last)
    EXECUTE FUNCTION ` + name("_chaos_cursor_audit_fn") + `();
CREATE TABLE ` + name("_chaos_park_audit") + ` (
    seq        bigint PRIMARY KEY DEFAULT nextval('` + seq + `'),
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    app        text NOT NULL DEFAULT current_setting('application_name'),
    id         bigint NOT NULL,
    shard      integer NOT NULL,
    status     text NOT NULL,
    last_error text
);
CREATE FUNCTION ` + name("_chaos_park_audit_fn") + `() RETURNS trigger LANGUAGE plpgsql AS $chaos$
BEGIN
    -- A resume's wake (outboxd resume, or a dispatcher that saw it) makes
    -- messages held back for a pause due: an operator's write, not the
    -- relay's, as retry-now is; nothing of the message changes but when.
    IF TG_OP = 'UPDATE' AND OLD.last_error = '` + pausedError + `' AND NEW.last_error IS NULL
       AND NEW.status = OLD.status AND NEW.attempts = OLD.attempts THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        INSERT INTO ` + name("_chaos_park_audit") + ` (id, shard, status) VALUES (OLD.id, OLD.shard, 'done');
    ELSE
        INSERT INTO ` + name("_chaos_park_audit") + ` (id, shard, status, last_error)
        VALUES (NEW.id, NEW.shard, NEW.status, NEW.last_error);
    END IF;
    RETURN NULL;
END
$chaos$;
CREATE TRIGGER chaos_park_audit AFTER INSERT OR UPDATE OR DELETE ON ` + name("_parked") + ` FOR EACH ROW
    EXECUTE FUNCTION ` + name("_chaos_park_audit_fn") + `();
CREATE VIEW ` + name("_chaos_status") + ` AS
SELECT o.id, o.aggregate_id, o.shard, o.uid, 0::bigint AS lease_version, p.last_error,
       CASE WHEN p.status IS NOT NULL THEN p.status
            WHEN pg_visible_in_snapshot(o.xid, h.done)
                 OR h.win IS NOT NULL AND pg_visible_in_snapshot(o.xid, h.win) AND o.id <= h.win_last THEN 'done'
            ELSE 'pending' END AS status
FROM ` + g.table + ` AS o
JOIN ` + name("_shards") + ` AS h ON h.shard = o.shard
LEFT JOIN ` + name("_parked") + ` AS p ON p.id = o.id;`
	if _, err := r.env.admin.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
		return err
	}
	g.status = name("_chaos_status")
	return nil
}

// pausedError is the mark of a message held back for a paused
// destination (store.PausedError), which a resume's wake clears.
const pausedError = "held back: its destination is paused"

// loadCursorAudit reads the cursor moves, and the parked writes as the
// table's audit trail would record them had the rows been written: each
// stamped with the token its shard had at the time (0: none yet).
func (r *run) loadCursorAudit(ctx context.Context, g *group) ([]cursorMove, []auditRec, error) {
	rows, err := r.env.admin.Query(ctx, `SELECT seq, shard, token, coalesce(owner, ''), app FROM `+
		pgx.Identifier{r.schema, g.name + "_chaos_cursor_audit"}.Sanitize()+` ORDER BY seq`)
	if err != nil {
		return nil, nil, err
	}
	moves, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cursorMove, error) {
		var m cursorMove
		err := row.Scan(&m.seq, &m.shard, &m.token, &m.owner, &m.app)
		return m, err
	})
	if err != nil {
		return nil, nil, err
	}
	rows, err = r.env.admin.Query(ctx, `SELECT seq, at, app, id, shard, status, coalesce(last_error, '') FROM `+
		pgx.Identifier{r.schema, g.name + "_chaos_park_audit"}.Sanitize()+` ORDER BY seq`)
	if err != nil {
		return nil, nil, err
	}
	var parks []auditRec
	for rows.Next() {
		var a auditRec
		var shard int
		if err := rows.Scan(&a.seq, &a.at, &a.app, &a.id, &shard, &a.newStatus, &a.lastError); err != nil {
			rows.Close()
			return nil, nil, err
		}
		a.oldStatus = "pending"
		a.newVersion = tokenAt(g.shardAcqs, shard, a.seq).token
		parks = append(parks, a)
	}
	return moves, parks, rows.Err()
}

// tokenAt is the takeover of shard current at audit seq (zero if none).
func tokenAt(acqs []shardAcq, shard int, seq int64) shardAcq {
	var cur shardAcq
	for _, a := range acqs {
		if a.seq > seq {
			break
		}
		if a.shard == shard {
			cur = a
		}
	}
	return cur
}

// cursorMoveChecks checks that every cursor move was written by the
// owner of the token its shard had at the time: a dispatcher that lost
// its shard must not move the cursor (it would skip what the new owner
// has not delivered, or hold back what it has).
func cursorMoveChecks(c *counts, acqs []shardAcq, moves []cursorMove) {
	for _, m := range moves {
		cur := tokenAt(acqs, m.shard, m.seq)
		if cur.token == 0 || cur.token != m.token || cur.owner != m.app {
			c.StaleFinalize++
			c.example("stale_finalize", "cursor of shard %d moved by %s under token %d at seq %d; the shard was %q's under token %d",
				m.shard, m.app, m.token, m.seq, cur.owner, cur.token)
		}
	}
}

// lastAcked stamps each row of a table relayed under snapshot cursors
// with the newest token a delivery of it was acknowledged under, which
// stands for the lease_version its done write would have stamped.
func lastAcked(rows map[int64]rowState, dels []delivery) {
	for _, d := range dels {
		if s, ok := rows[d.ID]; ok && d.Answer == answerOK && d.Token > s.version {
			s.version = d.Token
			rows[d.ID] = s
		}
	}
}
