//go:build chaos

package chaos

import (
	"encoding/json"
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
	h.rows[id] = rowState{status: status, version: version, agg: agg}
}

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

func (h *history) deliver(id, token int64, owner, answer string, ms int) {
	rec := h.g.led.committed[id]
	if r, ok := h.g.led.rolledBack[id]; ok {
		rec = r
	}
	body, _ := json.Marshal(payloadDoc{Producer: 0, N: id, Agg: rec.Agg, Blob: "b", Sum: payloadSum(0, id, rec.Agg, "b")})
	d := delivery{Group: "h", Path: owner, ID: id, Token: token, Received: h.at(ms), Answer: answer,
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
	return checkGroup(h.g, h.rows, h.audit, h.dels, h.events, runConfig{lease: 2 * time.Second, publishTimeout: time.Second})
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
		require.Zero(t, c.Lost+c.Phantom+c.FalseDone+c.Stuck+c.StaleFinalize+c.OrderingViolations+c.UnexplainedDuplicates+c.Corrupted+c.AuditAnomalies, "%+v", c)
		require.Equal(t, 2, c.DeliveredUnique)
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
