//go:build chaos

package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shardHistory is a history of a table relayed under shard leases: rows of
// shard 0, takeovers instead of claims.
type shardHistory struct{ *history }

func newShardHistory() shardHistory { return shardHistory{newHistory(true)} }

// take records owner taking shard 0 with token.
func (h shardHistory) take(token int64, owner string, ms int) {
	h.seq++
	h.g.shardAcqs = append(h.g.shardAcqs, shardAcq{seq: h.seq, shard: 0, token: token, owner: owner, at: h.at(ms)})
}

// write records writer's write of id from pending to status under token.
func (h shardHistory) write(id, before, token int64, writer, status string, ms int) {
	h.seq++
	h.audit = append(h.audit, auditRec{seq: h.seq, id: id, at: h.at(ms), xactNow: h.at(ms), app: writer,
		oldStatus: "pending", newStatus: status, oldVersion: before, newVersion: token})
}

func (h shardHistory) check() *counts {
	return checkGroup(h.g, h.rows, h.audit, h.dels, h.events, runConfig{lease: 2 * time.Second, publishTimeout: time.Second,
		leaseMode: leaseShard}, h.rejected)
}

func mustBeZero(c *counts) int {
	return c.Lost + c.Phantom + c.FalseDone + c.Stuck + c.StaleFinalize + c.OrderingViolations +
		c.UnexplainedDuplicates + c.Corrupted + c.AuditAnomalies + c.FalselyDead
}

// TestCheckerDetectsShardMode: the shard-lease checks see what they must,
// and a clean history passes them.
func TestCheckerDetectsShardMode(t *testing.T) {
	t.Parallel()
	t.Run("CleanHistoryIsClean", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.take(1, "w0-0", 0)
		for i, id := range []int64{1, 2} {
			h.commit(id, "a")
			h.row(id, "done", 1, "a")
			h.deliver(id, 1, "w0-0", answerOK, 10+100*i)
			h.write(id, 0, 1, "w0-0", "done", 20+100*i)
		}
		c := h.check()
		require.Zero(t, mustBeZero(c), "%+v", c)
		require.Equal(t, 2, c.DeliveredUnique)
	})
	t.Run("WriteAfterTakeover", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 10)
		h.take(2, "w1-0", 3000)
		h.write(1, 0, 1, "w0-0", "done", 3100) // the old owner writes after the takeover
		require.Equal(t, 1, h.check().StaleFinalize)
	})
	t.Run("WriteUnderAnotherOwnersToken", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 1, "w1-0", answerOK, 10)
		h.write(1, 0, 1, "w1-0", "done", 20)
		require.Equal(t, 1, h.check().StaleFinalize)
	})
	t.Run("DoneWithoutAck", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerDropped, 10)
		h.write(1, 0, 1, "w0-0", "done", 20)
		require.Equal(t, 1, h.check().StaleFinalize)
	})
	t.Run("DeliveryUnderATokenNeverTaken", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 7, "w0-0", answerOK, 10)
		h.deliver(1, 1, "w0-0", answerOK, 15)
		h.write(1, 0, 1, "w0-0", "done", 20)
		require.GreaterOrEqual(t, h.check().AuditAnomalies, 1)
	})
	t.Run("DuplicateAfterTakeover", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 10)
		h.take(2, "w1-0", 3000)
		h.deliver(1, 2, "w1-0", answerOK, 3010)
		h.write(1, 0, 2, "w1-0", "done", 3020)
		require.Equal(t, 1, h.check().UnexplainedDuplicates, "no fault of w0-0 explains it")
		h.events = []event{{Kind: "kill", Slot: "w0", Owner: "w0-0", Start: h.at(50), End: h.at(50)}}
		c := h.check()
		require.Zero(t, mustBeZero(c), "%+v", c)
		require.Equal(t, 1, c.DuplicatesByCause["holder_kill"])
	})
	t.Run("ReplayAfterACrash", func(t *testing.T) {
		t.Parallel()
		// w0 publishes 1 and 2 back to back (a chain) and dies before
		// finalizing either; w1 takes the shard and delivers both again,
		// in order.
		h := newShardHistory()
		h.take(1, "w0-0", 0)
		for _, id := range []int64{1, 2} {
			h.commit(id, "a")
			h.row(id, "done", 2, "a")
		}
		h.deliver(1, 1, "w0-0", answerOK, 10)
		h.deliver(2, 1, "w0-0", answerOK, 12)
		h.events = []event{{Kind: "kill", Slot: "w0", Owner: "w0-0", Start: h.at(50), End: h.at(50)}}
		h.take(2, "w1-0", 3000)
		h.deliver(1, 2, "w1-0", answerOK, 3010)
		h.deliver(2, 2, "w1-0", answerOK, 3012)
		h.write(1, 0, 2, "w1-0", "done", 3020)
		h.write(2, 0, 2, "w1-0", "done", 3021)
		c := h.check()
		require.Zero(t, mustBeZero(c), "%+v", c)

		// Had w1 not delivered 2 again after 1, the receiver's last word on
		// the aggregate would be 1: out of order.
		h.dels = h.dels[:len(h.dels)-1]
		h.write(2, 0, 1, "w0-0", "done", 40)
		require.Positive(t, h.check().OrderingDetail["delivery_order"])
	})
	t.Run("LaterMessageFirst", func(t *testing.T) {
		t.Parallel()
		// 2 goes out and is acknowledged before 1 ever went out: no replay
		// excuses that.
		h := newShardHistory()
		h.take(1, "w0-0", 0)
		for _, id := range []int64{1, 2} {
			h.commit(id, "a")
			h.row(id, "done", 1, "a")
		}
		h.deliver(2, 1, "w0-0", answerOK, 10)
		h.deliver(1, 1, "w0-0", answerOK, 12)
		h.write(2, 0, 1, "w0-0", "done", 20)
		h.write(1, 0, 1, "w0-0", "done", 21)
		require.Positive(t, h.check().OrderingDetail["delivery_order"])
	})
	t.Run("LateEarlierAttemptOfOneToken", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 500) // attempt 2, after attempt 1 timed out
		h.dels[len(h.dels)-1].Attempt = 2
		h.deliver(1, 1, "w0-0", answerLost, 510) // attempt 1, held up on the way
		h.dels[len(h.dels)-1].Attempt = 1
		h.write(1, 0, 1, "w0-0", "pending", 400)
		h.write(1, 1, 1, "w0-0", "done", 520)
		require.Equal(t, 1, h.check().UnexplainedDuplicates, "no fault explains the late attempt")
		h.events = []event{{Kind: faultSinkBlackHole, Slot: "w0", Start: h.at(100), End: h.at(450)}}
		c := h.check()
		require.Zero(t, mustBeZero(c), "%+v", c)
		require.Equal(t, 1, c.DuplicatesByCause["holder_"+faultSinkBlackHole])
	})
	t.Run("SameAttemptTwiceNeedsAFault", func(t *testing.T) {
		t.Parallel()
		h := newShardHistory()
		h.commit(1, "a")
		h.row(1, "done", 1, "a")
		h.take(1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 500)  // stored while its holder saw the sink fail
		h.deliver(1, 1, "w0-0", answerOK, 2500) // the same attempt again, released and republished
		h.write(1, 0, 1, "w0-0", "done", 2510)
		require.Equal(t, 1, h.check().UnexplainedDuplicates, "no fault explains the second publish")
		h.events = []event{{Kind: faultSinkCut, Slot: "w0", Start: h.at(100), End: h.at(600)}}
		c := h.check()
		require.Zero(t, mustBeZero(c), "%+v", c)
	})
}

// TestCheckerDetectsCursorMoves: a cursor moved by the shard's owner under
// its token passes; one moved after a takeover, or by a session that is
// not the owner, is a stale finalize.
func TestCheckerDetectsCursorMoves(t *testing.T) {
	t.Parallel()
	acqs := []shardAcq{{seq: 1, shard: 0, token: 1, owner: "w0-0"}, {seq: 5, shard: 0, token: 2, owner: "w1-0"}}
	for _, tc := range []struct {
		name  string
		move  cursorMove
		stale int
	}{
		{"ByTheOwner", cursorMove{seq: 3, shard: 0, token: 1, owner: "w0-0", app: "w0-0"}, 0},
		{"ByTheNextOwner", cursorMove{seq: 6, shard: 0, token: 2, owner: "w1-0", app: "w1-0"}, 0},
		{"AfterTheTakeover", cursorMove{seq: 6, shard: 0, token: 1, owner: "w0-0", app: "w0-0"}, 1},
		{"ByAnotherSession", cursorMove{seq: 3, shard: 0, token: 1, owner: "w0-0", app: "w1-0"}, 1},
		{"BeforeAnyTakeover", cursorMove{seq: 0, shard: 0, token: 1, owner: "w0-0", app: "w0-0"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &counts{}
			cursorMoveChecks(c, acqs, []cursorMove{tc.move})
			require.Equal(t, tc.stale, c.StaleFinalize)
		})
	}
}
