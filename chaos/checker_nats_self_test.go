//go:build chaos

package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// checkAs runs the checker on h as the given sink variant would, the
// broker's deliveries carrying no owner until the audit trail names it.
func (h *history) checkAs(sink string) *counts {
	if sink == sinkNATS {
		for i := range h.dels {
			h.dels[i].Path = ""
		}
		ownersFromAudit(h.dels, h.audit)
	}
	return checkGroup(h.g, h.rows, h.audit, h.dels, h.events,
		runConfig{lease: 2 * time.Second, publishTimeout: time.Second, sink: sink}, h.rejected)
}

// TestCheckerNATS covers what the checker does differently for a broker
// sink, whose PubAck it cannot see.
func TestCheckerNATS(t *testing.T) {
	t.Parallel()

	t.Run("OwnersFromAudit", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.delivered(1, "a", "w0-0", 0)
		h.delivered(2, "a", "w1-3", 100)
		c := h.checkAs(sinkNATS)
		require.Equal(t, "w0-0", h.dels[0].Path)
		require.Equal(t, "w1-3", h.dels[1].Path)
		require.Zero(t, c.StaleFinalize+c.FalseDone+c.Lost, "%+v", c)
	})
	// Stored, but the PubAck came too late: the holder retried, and the
	// next lease stored a second copy.
	retried := func() *history {
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.finalize(1, 1, "w0-0", "pending", 1100)
		h.claim(1, 2, "w1-0", 2500)
		h.deliver(1, 2, "w1-0", answerOK, 2505)
		h.finalize(1, 2, "w1-0", "done", 2510)
		return h
	}
	t.Run("DuplicateAfterFailedPublishIsExplained", func(t *testing.T) {
		t.Parallel()
		c := retried().checkAs(sinkNATS)
		require.Equal(t, 1, c.Duplicates)
		require.Equal(t, 1, c.DuplicatesByCause["holder_publish_failed"], "%+v", c.DuplicatesByCause)
		require.Zero(t, c.UnexplainedDuplicates)
	})
	t.Run("FailedPublishExplainsNothingOverHTTP", func(t *testing.T) {
		t.Parallel()
		// Over HTTP the 2xx was written: a retry after it is a defect.
		require.Equal(t, 1, retried().checkAs("").UnexplainedDuplicates)
	})
	t.Run("TakeoverWithoutFailureIsUnexplained", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		// w0-0 never finalized and had no fault: its lease was taken over.
		h.audit = append(h.audit, auditRec{seq: 99, id: 1, at: h.at(2500), xactNow: h.at(2500), app: "w1-0",
			oldStatus: "processing", newStatus: "processing", oldVersion: 1, newVersion: 2, oldOwner: "w0-0", newOwner: "w1-0",
			oldLeaseUntil: new(h.at(2000))})
		h.deliver(1, 2, "w1-0", answerOK, 2505)
		h.finalize(1, 2, "w1-0", "done", 2510)
		c := h.checkAs(sinkNATS)
		require.Equal(t, 1, c.UnexplainedDuplicates, "%+v", c.DuplicatesByCause)
	})
	t.Run("TakeoverAfterCredentialRevokedIsExplained", func(t *testing.T) {
		t.Parallel()
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.claim(1, 2, "w1-0", 2500)
		h.deliver(1, 2, "w1-0", answerOK, 2505)
		h.finalize(1, 2, "w1-0", "done", 2510)
		// The broker revoked w0's credential (resetting its link) right
		// after the publish: the PubAck never arrived.
		h.events = []event{{Kind: faultSinkAuth, Slot: "w0", Owner: "w0-0", Start: h.at(6), End: h.at(2000)}}
		c := h.checkAs(sinkNATS)
		require.Zero(t, c.UnexplainedDuplicates, "%+v", c.DuplicatesByCause)
		require.Equal(t, 1, c.DuplicatesByCause["holder_sink_auth"])
		// Over HTTP a 401 refuses the request, so it explains no copy.
		require.Equal(t, 1, h.checkAs("").UnexplainedDuplicates)
	})
	// The next lease's publish fell in JetStream's duplicate window: its
	// PubAck was the dedupe's, and nothing new was stored.
	deduped := func(gap int) *history {
		h := newHistory(false)
		h.commit(1, "a")
		h.row(1, "done", 2, "a")
		h.claim(1, 1, "w0-0", 0)
		h.deliver(1, 1, "w0-0", answerOK, 5)
		h.finalize(1, 1, "w0-0", "pending", 600)
		h.claim(1, 2, "w1-0", gap)
		h.finalize(1, 2, "w1-0", "done", gap+10)
		return h
	}
	t.Run("DedupedAckIsNotAStaleFinalize", func(t *testing.T) {
		t.Parallel()
		require.Zero(t, deduped(700).checkAs(sinkNATS).StaleFinalize)
	})
	t.Run("DoneLongAfterTheOnlyCopyIsStale", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 1, deduped(10_000).checkAs(sinkNATS).StaleFinalize)
	})
	t.Run("DoneWithoutAnyCopyIsStaleOverHTTP", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 1, deduped(700).checkAs("").StaleFinalize)
	})
}
