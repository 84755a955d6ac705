//go:build chaos

package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// counts are the checker's figures for one table (and, summed, a run).
type counts struct {
	Committed        int `json:"committed"`
	RolledBack       int `json:"rolled_back"`
	UncertainCommits int `json:"uncertain_commits"`          // COMMIT failed: resolved against the table
	UncertainLanded  int `json:"uncertain_commits_resolved"` // ... and the row exists (so it is committed)
	DeliveredUnique  int `json:"delivered_unique"`
	Deliveries       int `json:"deliveries"`

	// Must be zero.
	Lost                  int `json:"lost"`
	Phantom               int `json:"phantom"`
	FalseDone             int `json:"false_done"`
	Stuck                 int `json:"stuck"`
	StaleFinalize         int `json:"stale_finalize"`
	OrderingViolations    int `json:"ordering_violations"`
	UnexplainedDuplicates int `json:"unexplained_duplicates"`
	Corrupted             int `json:"corrupted"`
	AuditAnomalies        int `json:"audit_anomalies"`
	FalselyDead           int `json:"falsely_dead"`
	ProducerRejected      int `json:"producer_rejected"`
	SearchPathCaptures    int `json:"search_path_captures"`
	OrderedProbeLate      int `json:"ordered_probe_late"`
	AuthHealLate          int `json:"auth_heal_late"`
	// SharedIdentities counts deliveries sent under a key another
	// message was sent under.
	SharedIdentities int `json:"shared_identities"`

	// Reported only.
	Duplicates        int            `json:"duplicates"`
	DuplicatesByCause map[string]int `json:"duplicates_by_cause"`
	Dead              int            `json:"dead"`
	DeadUndelivered   int            `json:"dead_undelivered"`
	BlockedBehindDead int            `json:"blocked_behind_dead"`
	Claims            int            `json:"claims"`
	Reaped            int            `json:"reaped"`
	Retried           int            `json:"finalized_pending"`
	OrderingDetail    map[string]int `json:"ordering_violations_by_check,omitempty"`
	// Examples name a few offending rows per non-zero must-be-zero counter.
	Examples map[string][]string `json:"examples,omitempty"`
}

func (c *counts) example(key, format string, args ...any) {
	if c.Examples == nil {
		c.Examples = map[string][]string{}
	}
	if len(c.Examples[key]) < 8 {
		c.Examples[key] = append(c.Examples[key], fmt.Sprintf(format, args...))
	}
}

func (c *counts) add(o *counts) {
	c.Committed += o.Committed
	c.RolledBack += o.RolledBack
	c.UncertainCommits += o.UncertainCommits
	c.UncertainLanded += o.UncertainLanded
	c.DeliveredUnique += o.DeliveredUnique
	c.Deliveries += o.Deliveries
	c.Lost += o.Lost
	c.Phantom += o.Phantom
	c.FalseDone += o.FalseDone
	c.Stuck += o.Stuck
	c.StaleFinalize += o.StaleFinalize
	c.OrderingViolations += o.OrderingViolations
	c.UnexplainedDuplicates += o.UnexplainedDuplicates
	c.Corrupted += o.Corrupted
	c.SharedIdentities += o.SharedIdentities
	c.AuditAnomalies += o.AuditAnomalies
	c.FalselyDead += o.FalselyDead
	c.ProducerRejected += o.ProducerRejected
	c.SearchPathCaptures += o.SearchPathCaptures
	c.OrderedProbeLate += o.OrderedProbeLate
	c.AuthHealLate += o.AuthHealLate
	c.Duplicates += o.Duplicates
	c.Dead += o.Dead
	c.DeadUndelivered += o.DeadUndelivered
	c.BlockedBehindDead += o.BlockedBehindDead
	c.Claims += o.Claims
	c.Reaped += o.Reaped
	c.Retried += o.Retried
	if c.DuplicatesByCause == nil {
		c.DuplicatesByCause = map[string]int{}
	}
	for k, v := range o.DuplicatesByCause {
		c.DuplicatesByCause[k] += v
	}
	for k, v := range o.Examples {
		for _, e := range v {
			c.example(k, "%s", e)
		}
	}
}

// report is the one JSON document a run writes.
type report struct {
	Run     string `json:"run"`
	Tier    string `json:"tier"`
	Seed    uint64 `json:"seed"`
	Replay  string `json:"replay"`
	Started string `json:"started"`
	Classes string `json:"classes"`
	// LeaseMode is the workers' lease mode: row or shard.
	LeaseMode string `json:"lease_mode"`
	counts
	MigrateFailures int `json:"migrate_failures"`
	// SideRows are the side tables' messages of a run with pipelines
	// (pipelines_test.go), SideLost those not done or never acknowledged.
	SideRows         int                    `json:"pipeline_side_rows"`
	SideLost         int                    `json:"pipeline_side_lost"`
	Migrate          *pctiles               `json:"migrate_seconds,omitempty"`
	MigrateStall     *pctiles               `json:"migrate_producer_stall_ms,omitempty"`
	OrderedProbe     map[string]probeResult `json:"ordered_probe,omitempty"`
	AuthHealProbe    map[string]probeResult `json:"auth_heal_probe,omitempty"`
	FencedFinalizes  int                    `json:"fenced_finalizes"`
	Refused          map[string]int         `json:"sink_refusals"`
	ProducerTxErrors int                    `json:"producer_tx_errors"`
	Incarnations     int                    `json:"incarnations"`
	FaultCounts      map[string]int         `json:"fault_counts"`
	PhaseSeconds     float64                `json:"fault_phase_seconds"`
	DrainSeconds     float64                `json:"final_drain_seconds"`
	Latency          map[string]pctiles     `json:"delivery_latency_ms"`
	Throughput       map[string]float64     `json:"acks_per_second"`
	Recovery         recoveryStats          `json:"recovery_ms"`
	Groups           map[string]*counts     `json:"groups"`
	Faults           []event                `json:"faults"`
}

type pctiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type recoveryStats struct {
	ByKind map[string]pctiles `json:"by_kind"`
}

// failures lists the must-be-zero counters that are not.
func (r *report) failures() []string {
	var out []string
	for _, f := range []struct {
		name string
		n    int
	}{
		{"lost", r.Lost}, {"phantom", r.Phantom}, {"false_done", r.FalseDone}, {"stuck", r.Stuck},
		{"stale_finalize", r.StaleFinalize}, {"ordering_violations", r.OrderingViolations},
		{"unexplained_duplicates", r.UnexplainedDuplicates}, {"corrupted", r.Corrupted},
		{"audit_anomalies", r.AuditAnomalies}, {"falsely_dead", r.FalselyDead},
		{"producer_rejected", r.ProducerRejected}, {"search_path_captures", r.SearchPathCaptures},
		{"ordered_probe_late", r.OrderedProbeLate}, {"auth_heal_late", r.AuthHealLate},
		{"migrate_failures", r.MigrateFailures}, {"shared_identities", r.SharedIdentities},
		{"pipeline_side_lost", r.SideLost},
	} {
		if f.n != 0 {
			out = append(out, fmt.Sprintf("%s=%d", f.name, f.n))
		}
	}
	return out
}

type rowState struct {
	status    string
	version   int64
	agg       string
	lastError string
	shard     int    // shard mode only
	uid       string // the identity sinks send
}

type auditRec struct {
	seq                      int64
	id                       int64
	at, xactNow              time.Time
	app                      string
	oldStatus, newStatus     string
	oldVersion, newVersion   int64
	oldOwner, newOwner       string
	oldAttempts, newAttempts int
	oldLeaseUntil            *time.Time
	lastError                string
}

// isLifecycle tells process lifecycle events from faults.
func isLifecycle(kind string) bool { return kind == "start" || kind == "exit" || kind == "crash" }

func (r *run) check(drainTook time.Duration) (*report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dels, refused, err := r.deliveries()
	if err != nil {
		return nil, err
	}
	events := r.ev.snapshot()
	rep := &report{
		Run: r.cfg.name, Tier: r.cfg.tier, Seed: r.seed, Replay: fmt.Sprintf("CHAOS_SEED=%d", r.seed),
		Started: r.phaseStart.UTC().Format(time.RFC3339), Refused: refused, Classes: r.cfg.classes.String(),
		LeaseMode:   cmp.Or(r.cfg.leaseMode, leaseRow),
		FaultCounts: map[string]int{}, Groups: map[string]*counts{},
		PhaseSeconds: r.phaseEnd.Sub(r.phaseStart).Seconds(), DrainSeconds: drainTook.Seconds(),
	}
	rep.DuplicatesByCause = map[string]int{}
	for _, e := range events {
		switch {
		case e.Kind == "start":
			rep.Incarnations++
		case !isLifecycle(e.Kind):
			rep.FaultCounts[e.Kind]++
		}
	}
	byGroup := map[string][]delivery{}
	for _, d := range dels {
		byGroup[d.Group] = append(byGroup[d.Group], d)
	}
	// The deliveries again, with the owners the audit trail named (the
	// broker's carry none), for the per-slot recovery figures.
	var owned []delivery
	for _, g := range r.groups {
		rows, err := r.loadRows(ctx, g)
		if err != nil {
			return nil, err
		}
		audit, err := r.loadAudit(ctx, g)
		if err != nil {
			return nil, err
		}
		if sharded(r.cfg.leaseMode) {
			if g.shardAcqs, err = r.loadShardAudit(ctx, g); err != nil {
				return nil, err
			}
			ownersFromShards(byGroup[g.name], rows, g.shardAcqs)
		} else {
			ownersFromAudit(byGroup[g.name], audit)
		}
		var moves []cursorMove
		var written int
		if r.cfg.leaseMode == leaseCursor {
			// The rows are never written: the parked writes are the
			// audit trail, and the cursor moves are checked apart.
			written = len(audit)
			if moves, audit, err = r.loadCursorAudit(ctx, g); err != nil {
				return nil, err
			}
			lastAcked(rows, byGroup[g.name])
		}
		c := checkGroup(g, rows, audit, byGroup[g.name], events, r.cfg, r.rejectedLeases(g.name))
		if r.cfg.leaseMode == leaseCursor {
			cursorMoveChecks(c, g.shardAcqs, moves)
			if written > 0 {
				c.StaleFinalize += written
				c.example("stale_finalize", "%d writes of outbox rows under snapshot cursors, which write none", written)
			}
		}
		if err := r.classFigures(ctx, g, c); err != nil {
			return nil, err
		}
		owned = append(owned, byGroup[g.name]...)
		rep.Groups[g.name] = c
		rep.add(c)
		g.led.mu.Lock()
		rep.ProducerTxErrors += g.led.txErrors
		g.led.mu.Unlock()
	}
	rep.FencedFinalizes = countInLogs(r.dir, "lost lease: finalize fenced off")
	rep.MigrateFailures, rep.Migrate = migrateFigures(events)
	rep.MigrateStall = r.producerStall(events)
	rep.OrderedProbe = r.probes
	rep.AuthHealProbe = r.authHeal
	r.timing(rep, owned, events)
	return rep, nil
}

func (r *run) loadRows(ctx context.Context, g *group) (map[int64]rowState, error) {
	shard := "-1"
	if sharded(r.cfg.leaseMode) {
		shard = "coalesce(shard, -1)"
	}
	rows, err := r.env.admin.Query(ctx, `SELECT id, status, lease_version, aggregate_id, coalesce(last_error, ''), `+shard+`, coalesce(uid::text, '') FROM `+g.status)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]rowState{}
	for rows.Next() {
		var id int64
		var s rowState
		if err := rows.Scan(&id, &s.status, &s.version, &s.agg, &s.lastError, &s.shard, &s.uid); err != nil {
			return nil, err
		}
		out[id] = s
	}
	return out, rows.Err()
}

func (r *run) loadAudit(ctx context.Context, g *group) ([]auditRec, error) {
	rows, err := r.env.admin.Query(ctx, `SELECT seq, id, at, xact_now, app, old_status, new_status, old_version, new_version,
		coalesce(old_owner, ''), coalesce(new_owner, ''), old_attempts, new_attempts, old_lease_until, coalesce(last_error, '')
		FROM `+g.audit+` ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []auditRec
	for rows.Next() {
		var a auditRec
		if err := rows.Scan(&a.seq, &a.id, &a.at, &a.xactNow, &a.app, &a.oldStatus, &a.newStatus, &a.oldVersion, &a.newVersion,
			&a.oldOwner, &a.newOwner, &a.oldAttempts, &a.newAttempts, &a.oldLeaseUntil, &a.lastError); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

type leaseKey struct{ id, token int64 }

// claimAt is a claim in audit order.
type claimAt struct {
	seq int64
	id  int64
}

// checkGroup computes the counters of one table.
//
// rejected holds the leases the sink refused with an injected permanent
// answer: a message may end dead for those, and for nothing else but a
// reap the run allows.
func checkGroup(g *group, rows map[int64]rowState, audit []auditRec, dels []delivery, events []event, cfg runConfig,
	rejected map[leaseKey]bool) *counts {
	c := &counts{DuplicatesByCause: map[string]int{}}
	led := g.led
	led.mu.Lock()
	committed := make(map[int64]prodRec, len(led.committed))
	for id, rec := range led.committed {
		committed[id] = rec
	}
	c.RolledBack = len(led.rolledBack)
	c.UncertainCommits = len(led.uncertain)
	for id, rec := range led.uncertain {
		if _, ok := rows[id]; ok {
			committed[id] = rec
			c.UncertainLanded++
		}
	}
	led.mu.Unlock()
	c.Committed = len(committed)
	c.Deliveries = len(dels)

	// Content: every delivery must carry exactly what was committed under
	// its id.
	byID := map[int64][]delivery{}
	keyOwner := map[string]int64{}
	for _, d := range dels {
		byID[d.ID] = append(byID[d.ID], d)
		rec, known := led.lookup(d.ID)
		why := corruption(d, rec, known)
		if row, ok := rows[d.ID]; why == "" && ok && d.Key != row.uid {
			why = fmt.Sprintf("sent under identity %q, the row's uid is %q", d.Key, row.uid)
		}
		if why != "" {
			c.Corrupted++
			c.example("corrupted", "id %d token %d: %s", d.ID, d.Token, why)
		}
		// Identity: receivers deduplicate on the key, so two messages
		// under one key is a message silently dropped.
		if other, seen := keyOwner[d.Key]; seen && other != d.ID {
			c.SharedIdentities++
			c.example("shared_identities", "ids %d and %d both sent under %q", other, d.ID, d.Key)
		} else if !seen {
			keyOwner[d.Key] = d.ID
		}
	}
	c.DeliveredUnique = len(byID)

	for id := range byID {
		if _, ok := committed[id]; !ok {
			c.Phantom++
			why := "never written"
			if _, ok := led.rolledBack[id]; ok {
				why = "rolled back on purpose"
			} else if _, ok := led.uncertain[id]; ok {
				why = "COMMIT failed and the row does not exist"
			}
			c.example("phantom", "id %d delivered %d times: %s", id, len(byID[id]), why)
		}
	}
	// Rows blocked behind a dead head in ordered mode.
	blocked := map[int64]bool{}
	if g.cfg.ordered {
		firstDead := map[string]int64{}
		for id, s := range rows {
			if s.status == "dead" {
				if cur, ok := firstDead[s.agg]; !ok || id < cur {
					firstDead[s.agg] = id
				}
			}
		}
		for id, s := range rows {
			if d, ok := firstDead[s.agg]; ok && id > d && s.status != "done" && s.status != "dead" {
				blocked[id] = true
			}
		}
	}
	c.BlockedBehindDead = len(blocked)
	for id, rec := range committed {
		row, exists := rows[id]
		if _, delivered := byID[id]; !delivered {
			if exists && row.status == "dead" {
				c.DeadUndelivered++
				continue
			}
			if blocked[id] {
				continue
			}
			c.Lost++
			c.example("lost", "id %d (agg %s, committed %s) status %q", id, rec.Agg, rec.Committed.Format(time.RFC3339Nano), row.status)
		}
	}
	for id, s := range rows {
		switch s.status {
		case "done":
			if _, ok := byID[id]; !ok {
				c.FalseDone++
				c.example("false_done", "id %d done with lease_version %d, never delivered", id, s.version)
			}
		case "dead":
			c.Dead++
		case "pending", "processing":
			if !blocked[id] {
				c.Stuck++
				c.example("stuck", "id %d %s lease_version %d last_error %q", id, s.status, s.version, s.lastError)
			}
		}
		if _, ok := committed[id]; !ok {
			c.AuditAnomalies++
			c.example("audit_anomalies", "row %d exists but no producer wrote it", id)
		}
	}

	// Audit trail: who held which lease, and was every write fenced?
	claimOf := map[leaseKey]auditRec{}
	acked := map[leaseKey]map[string]bool{} // (id, token) -> owners that got a 2xx for it
	for _, d := range dels {
		if d.Answer == answerOK {
			k := leaseKey{d.ID, d.Token}
			if acked[k] == nil {
				acked[k] = map[string]bool{}
			}
			acked[k][d.Path] = true
		}
	}
	doneSeq := map[int64]int64{}
	// failed: leases whose holder itself finalized them as not done (it
	// saw its publish fail), by owner.
	failed := map[leaseKey]string{}
	var claims []claimAt
	if sharded(cfg.leaseMode) {
		shardAuditChecks(c, g.shardAcqs, rows, audit, dels, acked, byID, claimOf, failed, doneSeq, cfg)
	} else {
		claims = rowAuditChecks(c, audit, acked, byID, claimOf, failed, doneSeq, cfg)
	}

	// Duplicates: each delivery after the first of an id must be explained
	// by a fault of the lease holder that failed to record the earlier one.
	for id, ds := range byID {
		sort.Slice(ds, func(i, j int) bool {
			if !ds[i].Received.Equal(ds[j].Received) {
				return ds[i].Received.Before(ds[j].Received)
			}
			return ds[i].Seq < ds[j].Seq
		})
		for i := 1; i < len(ds); i++ {
			c.Duplicates++
			cause := explain(ds[i-1], ds[i], claimOf, failed, events, cfg)
			c.DuplicatesByCause[cause]++
			if strings.HasPrefix(cause, "unexplained") {
				c.UnexplainedDuplicates++
				c.example("unexplained_duplicates", "id %d: %s (prev token %d by %s answered %s at %s; this token %d by %s at %s)",
					id, cause, ds[i-1].Token, ds[i-1].Path, ds[i-1].Answer, ds[i-1].Received.Format("15:04:05.000"),
					ds[i].Token, ds[i].Path, ds[i].Received.Format("15:04:05.000"))
			}
		}
	}

	if g.cfg.ordered {
		c.OrderingDetail = map[string]int{}
		if cfg.leaseMode == leaseCursor {
			// A cursor move makes a window's rows done at once, with no
			// write per row to date them: the order is the deliveries'
			// (the acknowledgements' check below), not the writes'.
			doneSeq = map[int64]int64{}
		}
		orderingChecks(c, rows, byID, doneSeq, claims)
	}
	falselyDead(c, rows, audit, byID, cfg, rejected)
	led.mu.Lock()
	c.ProducerRejected = led.rejected
	for _, e := range led.rejections {
		c.example("producer_rejected", "%s", e)
	}
	led.mu.Unlock()
	return c
}

// falselyDead counts rows that ended dead for a reason other than an
// injected permanent fault: the lease that wrote dead was not refused by
// the sink with an injected permanent answer, or the row was reaped after
// its last attempt in a run that does not expect reaps. A message the sink
// accepted, or a healthy sink would have, must never end dead.
func falselyDead(c *counts, rows map[int64]rowState, audit []auditRec, byID map[int64][]delivery, cfg runConfig,
	rejected map[leaseKey]bool) {
	// The lease a write was made under: the row's own, which a claim set,
	// or under shard leases the shard token the write stamps.
	leaseOf := func(a auditRec) int64 {
		if sharded(cfg.leaseMode) {
			return a.newVersion
		}
		return a.oldVersion
	}
	lastDead := map[int64]auditRec{}
	for _, a := range audit {
		if a.newStatus == "dead" {
			lastDead[a.id] = a
		}
	}
	for id, s := range rows {
		if s.status != "dead" {
			continue
		}
		a, ok := lastDead[id]
		why := ""
		switch {
		case !ok:
			why = "dead, and no finalize or reap of the audit trail made it so"
		case strings.HasPrefix(a.lastError, "lease expired after max attempts"):
			if !cfg.allowReap {
				why = fmt.Sprintf("reaped by %s at lease %d", a.app, leaseOf(a))
			}
		case !rejected[leaseKey{id, leaseOf(a)}]:
			why = fmt.Sprintf("finalized dead by %s at lease %d, which the sink never refused permanently", a.app, leaseOf(a))
		}
		if why == "" {
			continue
		}
		acked := 0
		for _, d := range byID[id] {
			if d.Answer == answerOK {
				acked++
			}
		}
		c.FalselyDead++
		c.example("falsely_dead", "id %d: %s (acknowledged %d times): last_error %q", id, why, acked, truncateStr(a.lastError, 160))
	}
}

// dedupedAck reports whether a broker's PubAck for lease token of an id
// can have been JetStream's duplicate answer: the stream already held the
// id (the Nats-Msg-Id) from an older lease, stored within the duplicate
// window (1 s, plus slack for the clocks) before this lease was claimed
// or since. Such a publish stores nothing yet truly succeeds.
func dedupedAck(cfg runConfig, ds []delivery, token int64, claim auditRec) bool {
	if cfg.sink != sinkNATS || claim.at.IsZero() {
		return false
	}
	for _, d := range ds {
		if d.Token < token && !d.Received.Before(claim.at.Add(-2*time.Second)) {
			return true
		}
	}
	return false
}

// corruption says how a delivery differs from what was committed under its
// id ("" if it does not).
func corruption(d delivery, rec prodRec, known bool) string {
	doc, ok := decodePayload(d.body)
	switch {
	case !ok:
		return "payload does not verify against its own digest: " + truncateStr(string(d.body), 120)
	case !known:
		return "" // a phantom: counted there
	case doc.Producer != rec.Producer || doc.N != rec.N:
		return fmt.Sprintf("payload is message %d/%d, committed was %d/%d", doc.Producer, doc.N, rec.Producer, rec.N)
	case doc.Sum != rec.Sum:
		return "payload digest differs from the committed one"
	case d.Agg != rec.Agg || doc.Agg != rec.Agg:
		return fmt.Sprintf("aggregate %q/%q, committed %q", d.Agg, doc.Agg, rec.Agg)
	case d.EventType != rec.EventType:
		return fmt.Sprintf("event type %q, committed %q", d.EventType, rec.EventType)
	}
	return ""
}

func truncateStr(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// explain names the cause of the duplicate delivery cur of an id whose
// previous delivery was prev, or returns "unexplained: ...".
//
// The lease that failed to record its delivery is the older of the two
// tokens: prev's when cur is a newer claim (its holder published but did
// not finalize), cur's own when cur carries an older token than prev (a
// stale in-flight publish that arrived after a newer one). That holder
// must have suffered, between its claim and cur's arrival, a fault that
// explains losing the lease or the outcome: killed, paused, its database
// or sink link cut or black-holed or reset, its sessions terminated,
// PostgreSQL restarted; or the sink dropped the answer to prev.
//
// A broker's answer (the PubAck) is not observable: a stored message
// counts as acknowledged. There, a holder that finalized its lease as not
// done (a PubAck that came too late or not at all) also explains the
// duplicate: it saw its publish fail, so the re-publish of a new lease is
// the at-least-once retry, not a takeover.
func explain(prev, cur delivery, claimOf map[leaseKey]auditRec, failed map[leaseKey]string, events []event, cfg runConfig) string {
	if prev.Answer != answerOK && !attemptBefore(cur, prev) {
		return "answer_" + prev.Answer
	}
	sameAttempt := prev.Token == cur.Token && prev.Attempt == cur.Attempt
	if sameAttempt && !sharded(cfg.leaseMode) {
		return "unexplained: same lease delivered twice after a 2xx"
	}
	holder := prev
	if attemptBefore(cur, prev) {
		holder = cur
	}
	from := holder.Received.Add(-cfg.publishTimeout - time.Second)
	// Under shard leases one attempt is published again, under the same
	// token and attempt number, when its holder released it unpublished
	// as far as it could tell (a sink that failed, then delivered what
	// its client had buffered): a fault of the holder from that publish
	// on must explain it.
	if cl, ok := claimOf[leaseKey{holder.ID, holder.Token}]; ok && !sameAttempt {
		// A fault over before the claim cannot have cost this lease (the
		// audit and the harness read the same clock).
		from = cl.at.Add(-10 * time.Millisecond)
	}
	to := cur.Received
	slotName, _, _ := strings.Cut(holder.Path, "-")
	for _, e := range events {
		if isLifecycle(e.Kind) && e.Kind != "crash" {
			continue
		}
		if e.End.Before(from) || e.Start.After(to) {
			continue
		}
		switch {
		case e.Owner == holder.Path && (e.Kind == "kill" || e.Kind == "crash" || e.Kind == faultSigstop):
			return "holder_" + e.Kind
		case e.Slot == slotName && strings.HasPrefix(e.Kind, "db_"):
			return "holder_" + e.Kind
		case e.Slot == slotName && (e.Kind == faultSinkCut || e.Kind == faultSinkBlackHole || e.Kind == faultSinkReset):
			return "holder_" + e.Kind
		case e.Slot == slotName && e.Kind == faultSinkAuth && cfg.sink == sinkNATS:
			// The broker reset the link when it revoked the credential.
			return "holder_" + e.Kind
		case e.Kind == faultTerminate && (e.Slot == "" || e.Slot == slotName):
			return "holder_" + e.Kind
		case e.Kind == faultPGRestart || e.Kind == faultFailover:
			return e.Kind
		}
	}
	if cfg.sink == sinkNATS && holder.Path != "" && failed[leaseKey{holder.ID, holder.Token}] == holder.Path {
		return "holder_publish_failed"
	}
	return fmt.Sprintf("unexplained: holder %s of lease %d had no fault in force", holder.Path, holder.Token)
}

// attemptBefore orders two deliveries of one id by the attempt each made:
// by lease token, then by attempt number, since under shard leases one
// token covers every attempt its owner makes (under row leases each
// attempt is a claim with its own token).
func attemptBefore(a, b delivery) bool {
	if a.Token != b.Token {
		return a.Token < b.Token
	}
	return a.Attempt < b.Attempt
}

// supersededAttempt reports whether a later attempt of d's id was
// acknowledged: d is then a stale in-flight publish of an attempt its
// holder gave up on (under shard leases, with the same token).
func supersededAttempt(ds []delivery, d delivery) bool {
	for _, e := range ds {
		if e.Answer == answerOK && attemptBefore(d, e) {
			return true
		}
	}
	return false
}

// orderingChecks counts ordering violations of an ordered table:
//
//   - claim_order: a claim of id M while an earlier id N of its aggregate
//     was not yet done (by audit order);
//   - done_order: id M marked done before an earlier id N of its
//     aggregate;
//   - delivery_order: a delivery of id N received after a delivery of a
//     later id M of the same aggregate was acknowledged, unless that
//     delivery of N carries a token older than the one N was finally done
//     with (a stale in-flight publish of a lease that was lost, which the
//     duplicate check must explain in turn), or replays a sequence that
//     went out in order (see replayed).
func orderingChecks(c *counts, rows map[int64]rowState, byID map[int64][]delivery, doneSeq map[int64]int64, claims []claimAt) {
	byAgg := map[string][]int64{}
	for id, s := range rows {
		byAgg[s.agg] = append(byAgg[s.agg], id)
	}
	// For each id, the largest done seq of any earlier id of its aggregate.
	prevDone := map[int64]int64{}
	for _, ids := range byAgg {
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		var maxSeq int64
		for _, id := range ids {
			prevDone[id] = maxSeq
			s, ok := doneSeq[id]
			if !ok {
				s = math.MaxInt64
			}
			maxSeq = max(maxSeq, s)
		}
	}
	for _, cl := range claims {
		if p := prevDone[cl.id]; p > cl.seq {
			c.OrderingViolations++
			c.OrderingDetail["claim_order"]++
			c.example("ordering_violations", "claim of %d (audit seq %d) before every earlier id of %s was done", cl.id, cl.seq, rows[cl.id].agg)
		}
	}
	for id, s := range doneSeq {
		if p := prevDone[id]; p > s {
			c.OrderingViolations++
			c.OrderingDetail["done_order"]++
			c.example("ordering_violations", "%d done (audit seq %d) before an earlier id of %s", id, s, rows[id].agg)
		}
	}
	acks := map[string][]ack{}
	for id, ds := range byID {
		for _, d := range ds {
			if d.Answer == answerOK {
				acks[rows[id].agg] = append(acks[rows[id].agg], ack{d.Acked, id})
			}
		}
	}
	for agg, as := range acks {
		sort.Slice(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
		prefixMax := make([]int64, len(as))
		var m int64
		for i, a := range as {
			m = max(m, a.id)
			prefixMax[i] = m
		}
		for _, id := range byAgg[agg] {
			row := rows[id]
			for _, d := range byID[id] {
				k := sort.Search(len(as), func(i int) bool { return !as[i].at.Before(d.Received) })
				if k == 0 || prefixMax[k-1] <= id {
					continue
				}
				if row.status == "done" && (d.Token < row.version || supersededAttempt(byID[id], d)) {
					continue
				}
				if replayed(id, d, as[:k], byID) {
					continue
				}
				c.OrderingViolations++
				c.OrderingDetail["delivery_order"]++
				c.example("ordering_violations", "%s: id %d (token %d) received %s after id %d was acknowledged",
					agg, id, d.Token, d.Received.Format("15:04:05.000"), prefixMax[k-1])
			}
		}
	}
}

// ack is an acknowledged delivery of id.
type ack struct {
	at time.Time
	id int64
}

// replayed reports whether the delivery d of id, received after the later
// ids of acks were acknowledged, replays a sequence that went out in order:
// id was acknowledged before each of them, and each is delivered again
// after d. Under shard leases a dispatcher publishes an aggregate's next
// message as soon as the one before it is acknowledged, before either is
// finalized; when it dies, the next owner delivers them all again, in
// order. A receiver that deduplicates on the identity sees each message in
// order; the duplicate check explains the repeats.
func replayed(id int64, d delivery, acks []ack, byID map[int64][]delivery) bool {
	var first time.Time
	for _, e := range byID[id] {
		if e.Answer == answerOK && (first.IsZero() || e.Acked.Before(first)) {
			first = e.Acked
		}
	}
	if first.IsZero() || !first.Before(d.Received) {
		return false // this is id's first delivery: a later id went first
	}
	for _, a := range acks {
		if a.id <= id {
			continue
		}
		if a.at.Before(first) {
			return false
		}
		again := false
		for _, e := range byID[a.id] {
			again = again || e.Received.After(d.Received)
		}
		if !again {
			return false
		}
	}
	return true
}

// timing fills latency, throughput and recovery figures.
func (r *run) timing(rep *report, dels []delivery, events []event) {
	var faults []event
	for _, e := range events {
		if !isLifecycle(e.Kind) {
			faults = append(faults, e)
		}
	}
	inFault := func(t time.Time) bool {
		for _, e := range faults {
			if !t.Before(e.Start) && !t.After(e.End.Add(time.Second)) {
				return true
			}
		}
		return false
	}
	var ackTimes []time.Time
	firstAck := map[string]map[int64]time.Time{}
	for _, d := range dels {
		if d.Answer != answerOK {
			continue
		}
		ackTimes = append(ackTimes, d.Acked)
		if firstAck[d.Group] == nil {
			firstAck[d.Group] = map[int64]time.Time{}
		}
		if t, ok := firstAck[d.Group][d.ID]; !ok || d.Acked.Before(t) {
			firstAck[d.Group][d.ID] = d.Acked
		}
	}
	sort.Slice(ackTimes, func(i, j int) bool { return ackTimes[i].Before(ackTimes[j]) })
	lat := map[string][]float64{}
	for _, g := range r.groups {
		g.led.mu.Lock()
		for id, rec := range g.led.committed {
			t, ok := firstAck[g.name][id]
			if !ok {
				continue
			}
			ms := float64(t.Sub(rec.Committed).Microseconds()) / 1000
			lat["all"] = append(lat["all"], ms)
			if !rec.Committed.Before(r.phaseStart) && !rec.Committed.After(r.phaseEnd) {
				if inFault(rec.Committed) {
					lat["during_faults"] = append(lat["during_faults"], ms)
				} else {
					lat["calm"] = append(lat["calm"], ms)
				}
			}
		}
		g.led.mu.Unlock()
	}
	rep.Latency = map[string]pctiles{}
	for k, v := range lat {
		rep.Latency[k] = percentiles(v)
	}
	// Throughput in 100 ms buckets over the fault phase.
	rep.Throughput = map[string]float64{}
	if r.phaseEnd.After(r.phaseStart) {
		var faultBuckets, calmBuckets, faultAcks, calmAcks float64
		for t := r.phaseStart; t.Before(r.phaseEnd); t = t.Add(100 * time.Millisecond) {
			end := t.Add(100 * time.Millisecond)
			lo := sort.Search(len(ackTimes), func(i int) bool { return !ackTimes[i].Before(t) })
			hi := sort.Search(len(ackTimes), func(i int) bool { return !ackTimes[i].Before(end) })
			if inFault(t) {
				faultBuckets++
				faultAcks += float64(hi - lo)
			} else {
				calmBuckets++
				calmAcks += float64(hi - lo)
			}
		}
		if faultBuckets > 0 {
			rep.Throughput["during_faults"] = faultAcks / (faultBuckets / 10)
		}
		if calmBuckets > 0 {
			rep.Throughput["calm"] = calmAcks / (calmBuckets / 10)
		}
	}
	// Recovery: from the end of a fault to the first acknowledged delivery
	// by the slot it targeted (a new incarnation after a kill), or by
	// anyone for a fault of the whole system.
	slotAcks := map[string][]time.Time{}
	for _, d := range dels {
		if d.Answer == answerOK {
			sl, _, _ := strings.Cut(d.Path, "-")
			slotAcks[sl] = append(slotAcks[sl], d.Acked)
		}
	}
	for _, v := range slotAcks {
		sort.Slice(v, func(i, j int) bool { return v[i].Before(v[j]) })
	}
	rec := map[string][]float64{}
	for i := range events {
		e := &events[i]
		if isLifecycle(e.Kind) {
			continue
		}
		times := ackTimes
		if e.Slot != "" {
			times = slotAcks[e.Slot]
		}
		k := sort.Search(len(times), func(j int) bool { return times[j].After(e.End) })
		if k < len(times) {
			ms := times[k].Sub(e.End).Milliseconds()
			e.RecoveryMS = &ms
			rec[e.Kind] = append(rec[e.Kind], float64(ms))
		}
	}
	rep.Recovery.ByKind = map[string]pctiles{}
	for k, v := range rec {
		rep.Recovery.ByKind[k] = percentiles(v)
	}
	for _, e := range events {
		if !isLifecycle(e.Kind) {
			rep.Faults = append(rep.Faults, e)
		}
	}
}

func percentiles(v []float64) pctiles {
	if len(v) == 0 {
		return pctiles{}
	}
	sort.Float64s(v)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(v)))) - 1
		return math.Round(v[max(i, 0)]*10) / 10
	}
	return pctiles{N: len(v), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: at(1)}
}

// rowAuditChecks checks the audit trail of a table relayed under row
// leases: every claim took a free or expired lease, every later write was
// made by the holder of the lease it names, every done was acknowledged.
// It fills claimOf, failed and doneSeq, and returns the claims in order.
func rowAuditChecks(c *counts, audit []auditRec, acked map[leaseKey]map[string]bool, byID map[int64][]delivery,
	claimOf map[leaseKey]auditRec, failed map[leaseKey]string, doneSeq map[int64]int64, cfg runConfig) []claimAt {
	var claims []claimAt
	for _, a := range audit {
		isClaim := a.newStatus == "processing" && (a.oldStatus != "processing" || a.newVersion != a.oldVersion)
		switch {
		case isClaim:
			c.Claims++
			claimOf[leaseKey{a.id, a.newVersion}] = a
			claims = append(claims, claimAt{a.seq, a.id})
			if a.newVersion != a.oldVersion+1 || a.newOwner != a.app {
				c.AuditAnomalies++
				c.example("audit_anomalies", "claim of %d by %s: version %d->%d owner %q", a.id, a.app, a.oldVersion, a.newVersion, a.newOwner)
			}
			if a.oldStatus == "processing" && (a.oldLeaseUntil == nil || !a.oldLeaseUntil.Before(a.xactNow)) {
				c.AuditAnomalies++
				c.example("audit_anomalies", "claim of %d by %s took a live lease (version %d of %s until %v, now %v)",
					a.id, a.app, a.oldVersion, a.oldOwner, a.oldLeaseUntil, a.xactNow)
			}
			if a.oldStatus != "processing" && a.oldStatus != "pending" {
				c.AuditAnomalies++
				c.example("audit_anomalies", "claim of %d by %s from status %s", a.id, a.app, a.oldStatus)
			}
		case a.newVersion != a.oldVersion:
			c.AuditAnomalies++
			c.example("audit_anomalies", "write to %d by %s changed lease_version %d->%d outside a claim", a.id, a.app, a.oldVersion, a.newVersion)
		case a.oldStatus != "processing":
			// A terminal (or any) write to a row nobody holds.
			c.StaleFinalize++
			c.example("stale_finalize", "write to %d by %s: %s -> %s at version %d", a.id, a.app, a.oldStatus, a.newStatus, a.oldVersion)
		case a.newStatus == "dead" && strings.HasPrefix(a.lastError, "lease expired after max attempts"):
			c.Reaped++
			if a.oldLeaseUntil == nil || !a.oldLeaseUntil.Before(a.xactNow) {
				c.StaleFinalize++
				c.example("stale_finalize", "reap of %d by %s while lease %d was live", a.id, a.app, a.oldVersion)
			}
		default:
			holder, ok := claimOf[leaseKey{a.id, a.oldVersion}]
			if a.newStatus != "done" {
				failed[leaseKey{a.id, a.oldVersion}] = a.app
			}
			if !ok || holder.app != a.app {
				c.StaleFinalize++
				c.example("stale_finalize", "finalize of %d (%s) by %s with lease %d held by %q", a.id, a.newStatus, a.app, a.oldVersion, holder.app)
			}
			switch a.newStatus {
			case "done":
				if _, seen := doneSeq[a.id]; !seen {
					doneSeq[a.id] = a.seq
				}
				if !acked[leaseKey{a.id, a.oldVersion}][a.app] && !dedupedAck(cfg, byID[a.id], a.oldVersion, claimOf[leaseKey{a.id, a.oldVersion}]) {
					c.StaleFinalize++
					c.example("stale_finalize", "done of %d by %s at lease %d, but the sink never acknowledged that lease to it", a.id, a.app, a.oldVersion)
				}
			case "pending":
				c.Retried++
			}
		}
	}
	return claims
}
