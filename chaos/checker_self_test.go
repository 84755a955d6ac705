//go:build chaos

package chaos

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// history builds a synthetic run for the checker: what producers wrote,
// what the table and its audit trail say, what the sink received.
type history struct {
	g      *group
	rows   map[int64]rowState
	audit  []auditRec
	dels   []delivery
	events []event
	t0     time.Time
	seq    int64
	// rejected: leases the sink refused with an injected permanent answer.
	rejected  map[leaseKey]bool
	allowReap bool
}

func newHistory(ordered bool) *history {
	return &history{
		g:    &group{cfg: groupConfig{name: "h", ordered: ordered}, name: "h", led: newLedger()},
		rows: map[int64]rowState{},
		t0:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

func (h *history) at(ms int) time.Time { return h.t0.Add(time.Duration(ms) * time.Millisecond) }

// commit logs id as committed by the producer, on aggregate agg.
func (h *history) commit(id int64, agg string) {
	h.g.led.committed[id] = prodRec{Producer: 0, N: id, Agg: agg, EventType: "E", Sum: payloadSum(0, id, agg, "b"), Committed: h.t0}
}

func (h *history) row(id int64, status string, version int64, agg string) {
	h.rows[id] = rowState{status: status, version: version, agg: agg, uid: uidOf(id)}
}

// uidOf is the identity the history's row id carries.
func uidOf(id int64) string { return fmt.Sprintf("uid-%d", id) }

func (h *history) claim(id, version int64, owner string, ms int) {
	h.seq++
	h.audit = append(h.audit, auditRec{seq: h.seq, id: id, at: h.at(ms), xactNow: h.at(ms), app: owner,
		oldStatus: "pending", newStatus: "processing", oldVersion: version - 1, newVersion: version, newOwner: owner})
}

func (h *history) finalize(id, version int64, writer, status string, ms int) {
	h.seq++
	h.audit = append(h.audit, auditRec{seq: h.seq, id: id, at: h.at(ms), xactNow: h.at(ms), app: writer,
		oldStatus: "processing", newStatus: status, oldVersion: version, newVersion: version, oldOwner: writer})
}

// dead is a write of dead on lease version of id: a finalize by the
// holder, or a reap (lastError "lease expired after max attempts") by
// whoever claims next.
func (h *history) dead(id, version int64, writer, lastError string, ms int) {
	h.seq++
	until := h.at(ms - 100)
	h.audit = append(h.audit, auditRec{seq: h.seq, id: id, at: h.at(ms), xactNow: h.at(ms), app: writer,
		oldStatus: "processing", newStatus: "dead", oldVersion: version, newVersion: version, oldOwner: "w0-0",
		oldLeaseUntil: &until, lastError: lastError})
}

func (h *history) deliver(id, token int64, owner, answer string, ms int) {
	rec := h.g.led.committed[id]
	if r, ok := h.g.led.rolledBack[id]; ok {
		rec = r
	}
	body, _ := json.Marshal(payloadDoc{Producer: 0, N: id, Agg: rec.Agg, Blob: "b", Sum: payloadSum(0, id, rec.Agg, "b")})
	d := delivery{Group: "h", Path: owner, ID: id, Key: uidOf(id), Token: token, Received: h.at(ms), Answer: answer,
		Agg: rec.Agg, EventType: "E", body: body}
	if answer == answerOK {
		d.Acked = h.at(ms + 1)
	}
	h.dels = append(h.dels, d)
}

// delivered is the happy path of one message: claimed, delivered, done.
func (h *history) delivered(id int64, agg, owner string, ms int) {
	h.commit(id, agg)
	h.row(id, "done", 1, agg)
	h.claim(id, 1, owner, ms)
	h.deliver(id, 1, owner, answerOK, ms+5)
	h.finalize(id, 1, owner, "done", ms+10)
}

func (h *history) check() *counts {
	return checkGroup(h.g, h.rows, h.audit, h.dels, h.events, runConfig{lease: 2 * time.Second, publishTimeout: time.Second,
		allowReap: h.allowReap}, h.rejected)
}

// TestCheckerDetects feeds the checker histories with one defect each and
// requires it to count exactly that defect, so a green chaos run means
// something.
func TestCheckerDetects(t *testing.T) {
	t.Parallel()

	t.Run("CleanHistoryIsClean", func(t *testing.T) {
		t.Parallel()
		h := newHistory(true)
		h.delivered(1, "a", "w0-0", 0)
		h.delivered(2, "a", "w1-0", 100)
		c := h.check()
		require.Zero(t, c.Lost+c.Phantom+c.FalseDone+c.Stuck+c.StaleFinalize+c.OrderingViolations+c.UnexplainedDuplicates+c.Corrupted+c.AuditAnomalies+c.FalselyDead, "%+v", c)
		require.Equal(t, 2, c.DeliveredUnique)
	})
	t.Run("SharedIdentity", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		h.delivered(2, "b", "w0-0", 100)
		h.rows[2] = rowState{status: "done", version: 1, agg: "b", uid: uidOf(1)}
		h.dels[1].Key = uidOf(1)
		c := h.check()
		require.Equal(t, 1, c.SharedIdentities, "%+v", c)
		require.Zero(t, c.Corrupted, "the key is the row's uid: only its reuse is wrong")
	})
	t.Run("KeyIsNotTheRowsUID", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		h.dels[0].Key = "1"
		c := h.check()
		require.Equal(t, 1, c.Corrupted, "%+v", c)
	})
	t.Run("Lost", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "pending", 0, "a")
		c := h.check()
		require.Equal(t, 1, c.Lost)
		require.Equal(t, 1, c.Stuck)
	})
	t.Run("LostCommitMissingFromTable", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a") // acknowledged, then lost by the database
		require.Equal(t, 1, h.check().Lost)
	})
	t.Run("PhantomRolledBack", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.g.led.rolledBack[7] = prodRec{Agg: "a", N: 7, Sum: payloadSum(0, 7, "a", "b"), EventType: "E"}
		h.deliver(7, 1, "w0-0", answerOK, 0)
		require.Equal(t, 1, h.check().Phantom)
	})
	t.Run("UncertainCommitResolvedByTable", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.g.led.uncertain[1] = prodRec{Agg: "a", N: 1, Sum: payloadSum(0, 1, "a", "b"), EventType: "E"}
		h.g.led.uncertain[2] = prodRec{Agg: "a", N: 2, Sum: payloadSum(0, 2, "a", "b"), EventType: "E"}
		h.row(1, "pending", 0, "a") // it did commit: undelivered is lost (and stuck)
		h.deliver(2, 1, "w0-0", answerOK, 0)
		c := h.check()
		require.Equal(t, 1, c.UncertainLanded)
		require.Equal(t, 1, c.Lost)
		require.Equal(t, 1, c.Phantom) // 2 never landed, yet was delivered
	})
	t.Run("FalseDone", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		c := h.check()
		require.Equal(t, 1, c.FalseDone)
	})
	t.Run("StaleFinalizeByOtherOwner", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.claim(1, 2, "w1-0", 3000)
		h.finalize(1, 2, "w0-0", "done", 3100) // w0 writes over w1's lease
		c := h.check()
		require.GreaterOrEqual(t, c.StaleFinalize, 1)
	})
	t.Run("DoneWithoutAckOfItsToken", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.claim(1, 2, "w0-1", 3000)
		h.finalize(1, 2, "w0-1", "done", 3100) // lease 2 was never published
		require.Equal(t, 1, h.check().StaleFinalize)
	})
	t.Run("TerminalWriteOnFinishedRow", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		h.seq++
		h.audit = append(h.audit, auditRec{seq: h.seq, id: 1, app: "w0-0", oldStatus: "done", newStatus: "dead", oldVersion: 1, newVersion: 1})
		require.Equal(t, 1, h.check().StaleFinalize)
	})
	t.Run("UnexplainedDuplicate", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.claim(1, 2, "w1-0", 3000)
		h.deliver(1, 2, "w1-0", answerOK, 3005)
		h.finalize(1, 2, "w1-0", "done", 3010)
		c := h.check()
		require.Equal(t, 1, c.UnexplainedDuplicates, "%+v", c)

		h.events = []event{{Kind: "kill", Slot: "w0", Owner: "w0-0", Start: h.at(50), End: h.at(50)}}
		c = h.check()
		require.Zero(t, c.UnexplainedDuplicates)
		require.Equal(t, 1, c.DuplicatesByCause["holder_kill"])

		// A fault of another worker, or one before the claim, explains nothing.
		h.events = []event{
			{Kind: "kill", Slot: "w2", Owner: "w2-0", Start: h.at(50), End: h.at(50)},
			{Kind: faultDBCut, Slot: "w0", Start: h.at(-5000), End: h.at(-4000)},
		}
		require.Equal(t, 1, h.check().UnexplainedDuplicates)
	})
	t.Run("DuplicateAfterDroppedAnswer", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerDropped, 5)
		h.finalize(1, 1, "w0-0", "pending", 10)
		h.claim(1, 2, "w0-0", 100)
		h.deliver(1, 2, "w0-0", answerOK, 105)
		h.finalize(1, 2, "w0-0", "done", 110)
		c := h.check()
		require.Zero(t, c.UnexplainedDuplicates+c.StaleFinalize, "%+v", c)
		require.Equal(t, 1, c.DuplicatesByCause["answer_dropped"])
	})
	t.Run("StaleInflightDeliveryNeedsItsOwnFault", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.claim(1, 2, "w1-0", 3000)
		h.deliver(1, 2, "w1-0", answerOK, 3005)
		h.finalize(1, 2, "w1-0", "done", 3010)
		h.deliver(1, 1, "w0-0", answerOK, 4000) // w0's old publish lands last
		require.Equal(t, 1, h.check().UnexplainedDuplicates)
		h.events = []event{{Kind: faultSigstop, Slot: "w0", Owner: "w0-0", Start: h.at(10), End: h.at(3900)}}
		c := h.check()
		require.Zero(t, c.UnexplainedDuplicates)
		require.Equal(t, 1, c.DuplicatesByCause["holder_sigstop"])
	})
	t.Run("OrderingDeliveryAfterLaterAck", func(t *testing.T) {
		t.Parallel()
		h := newHistory(true)
		h.delivered(2, "a", "w1-0", 0)   // id 2 acked first...
		h.delivered(1, "a", "w0-0", 500) // ...then id 1, with its final token
		c := h.check()
		require.Positive(t, c.OrderingDetail["delivery_order"], "%+v", c)
		require.Positive(t, c.OrderingDetail["done_order"])
		require.Positive(t, c.OrderingDetail["claim_order"])
	})
	t.Run("OrderingStaleRedeliveryIsAllowed", func(t *testing.T) {
		t.Parallel()
		h := newHistory(true)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.claim(1, 2, "w1-0", 3000)
		h.deliver(1, 2, "w1-0", answerOK, 3005)
		h.finalize(1, 2, "w1-0", "done", 3010)
		h.delivered(2, "a", "w1-0", 3100)
		h.deliver(1, 1, "w0-0", answerOK, 4000) // stale token 1 after id 2's ack
		h.events = []event{{Kind: faultSigstop, Slot: "w0", Owner: "w0-0", Start: h.at(10), End: h.at(3900)}}
		c := h.check()
		require.Zero(t, c.OrderingViolations, "%+v", c)
		require.Zero(t, c.UnexplainedDuplicates)
	})
	t.Run("Corrupted", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		h.dels[0].body = []byte(`{"p":0,"n":1,"agg":"a","blob":"c","sum":"0000"}`)
		require.Equal(t, 1, h.check().Corrupted)
		h.dels[0].body, _ = json.Marshal(payloadDoc{N: 9, Agg: "a", Blob: "b", Sum: payloadSum(0, 9, "a", "b")})
		require.Equal(t, 1, h.check().Corrupted) // a valid payload, of another message
	})
	t.Run("FalselyDead", func(t *testing.T) {
		t.Parallel()
		// Refused 401 while a credential rotated: the sink was not
		// healthy, but a healthy one would have taken it.
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "dead", 1, "a")
		h.claim(1, 1, "w0-0", 0)
		h.dead(1, 1, "w0-0", "httpsink: POST http://x: HTTP 401 Unauthorized", 10)
		c := h.check()
		require.Equal(t, 1, c.FalselyDead, "%+v", c)
		require.Equal(t, 1, c.DeadUndelivered)

		// The same row refused 422 by the sink on that very lease is
		// dead for an injected permanent fault.
		h.rejected = map[leaseKey]bool{{1, 1}: true}
		require.Zero(t, h.check().FalselyDead)
		// A refusal of another lease does not cover it.
		h.rejected = map[leaseKey]bool{{1, 2}: true}
		require.Equal(t, 1, h.check().FalselyDead)
	})
	t.Run("FalselyDeadAfterAcceptedDelivery", func(t *testing.T) {
		t.Parallel()
		// Delivered and acknowledged, its done lost with a failing batch,
		// then reaped after its last attempt.
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "dead", 1, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.dead(1, 1, "w1-0", "lease expired after max attempts", 3100)
		c := h.check()
		require.Equal(t, 1, c.FalselyDead, "%+v", c)
		require.Zero(t, c.StaleFinalize, "a reap after the lease expired is fenced correctly")
		require.Equal(t, 1, c.Reaped)
		// Where the run asks for reaps (--max-attempts 1 after a kill),
		// the same history is the expected outcome.
		h.allowReap = true
		require.Zero(t, h.check().FalselyDead)
	})
	t.Run("FalselyDeadWithoutAudit", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "dead", 0, "a")
		require.Equal(t, 1, h.check().FalselyDead)
	})
	t.Run("ProducerRejected", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		require.Zero(t, h.check().ProducerRejected)
		h.g.led.rejected, h.g.led.rejections = 2, []string{`relation "u_waiters" does not exist`}
		c := h.check()
		require.Equal(t, 2, c.ProducerRejected)
		require.NotEmpty(t, c.Examples["producer_rejected"])
	})
	t.Run("ClaimOfLiveLease", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		until := h.at(5000)
		h.seq++
		h.audit = append(h.audit, auditRec{seq: h.seq, id: 1, at: h.at(20), xactNow: h.at(20), app: "w1-0",
			oldStatus: "processing", newStatus: "processing", oldVersion: 1, newVersion: 2, newOwner: "w1-0", oldLeaseUntil: &until})
		require.Positive(t, h.check().AuditAnomalies)
	})
}

// TestCheckerClasses covers CHAOS_CLASSES: the default set, additions,
// "all", removals, and a mistyped name.
func TestCheckerClasses(t *testing.T) {
	t.Parallel()
	c, err := parseClasses("")
	require.NoError(t, err)
	for _, k := range allClasses {
		require.Equal(t, slices.Contains(defaultClasses, k), c.has(k), k)
	}
	c, err = parseClasses("migrate, +search_path")
	require.NoError(t, err)
	require.True(t, c.has(classMigrate) && c.has(classSearchPath))
	c, err = parseClasses("all,-migrate")
	require.NoError(t, err)
	require.False(t, c.has(classMigrate))
	require.True(t, c.has(classPublishHang))
	_, err = parseClasses("migrat")
	require.ErrorContains(t, err, `unknown class "migrat"`)

	c, err = parseClasses("all")
	require.NoError(t, err)
	menu := menuFor(weightedFaults, c, false)
	for _, w := range menu {
		require.NotContains(t, []string{faultSinkBadText, faultSinkReject}, w.kind, "a webhook fault in a broker menu")
	}
	require.Contains(t, menu, weightedFault{faultMigrate, 2})
}
