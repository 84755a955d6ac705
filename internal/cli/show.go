package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/console"
)

func runShow(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	c := newDBCommand(e, "show", "show ID [--json]")
	c.BoolVar(&asJSON, "json", false, "print JSON (the shape of the console API's message)")
	if err := c.parseWithArgs(e, args); err != nil {
		return err
	}
	if len(c.Args()) != 1 {
		return usagef("show: want exactly one message id")
	}
	ids, err := parseIDs(c.Args())
	if err != nil {
		return err
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		m, err := a.Message(ctx, ids[0])
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			return fmt.Errorf("no message %d in %s", ids[0], c.db.table)
		case err != nil:
			return err
		case asJSON:
			return writeJSON(e.stdout, console.DetailView(m))
		}
		return printMessage(e.stdout, m)
	})
}

// printMessage writes one message: its properties, payload and headers, then
// its attempt history, one line per attempt, the newest first.
func printMessage(out io.Writer, m *outbox.MessageDetail) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%d\n", m.ID)
	if m.UID != "" {
		fmt.Fprintf(w, "uid\t%s\n", m.UID)
	}
	fmt.Fprintf(w, "status\t%s\n", m.Status)
	fmt.Fprintf(w, "aggregate\t%s / %s\n", m.AggregateType, m.AggregateID)
	fmt.Fprintf(w, "event type\t%s\n", m.EventType)
	fmt.Fprintf(w, "created at\t%s\n", isoTime(m.CreatedAt))
	fmt.Fprintf(w, "available at\t%s\n", isoTime(m.AvailableAt))
	if m.DoneAt != nil {
		fmt.Fprintf(w, "finished at\t%s\n", isoTime(*m.DoneAt))
	}
	fmt.Fprintf(w, "attempts\t%d\n", m.Attempts)
	fmt.Fprintf(w, "lease version\t%d\n", m.LeaseVersion)
	if m.LeaseOwner != nil && m.LeaseUntil != nil {
		fmt.Fprintf(w, "lease\t%s until %s\n", *m.LeaseOwner, isoTime(*m.LeaseUntil))
	}
	if m.LastError != nil {
		fmt.Fprintf(w, "last error\t%s\n", oneLine(*m.LastError, 200))
	}
	if m.Status == "pending" && m.Attempts > 0 && m.AvailableAt.After(time.Now()) {
		fmt.Fprintf(w, "next attempt\t%s (outboxd retry-now %d makes it due now)\n", isoTime(m.AvailableAt), m.ID)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "payload\n  %s\n", indentPayload(m.Payload))
	if len(m.Headers) > 0 {
		h, _ := json.Marshal(m.Headers)
		fmt.Fprintf(out, "headers\n  %s\n", h)
	}
	if len(m.History) == 0 {
		fmt.Fprintln(out, "\nno failed attempts recorded")
		return nil
	}
	fmt.Fprintf(out, "\nattempt history (%d, newest first)\n", len(m.History))
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "AT\tATTEMPT\tOUTCOME\tSTATUS\tTOOK\tDISPATCHER\tERROR")
	for _, h := range m.History {
		status := "-"
		if h.Status != 0 {
			status = fmt.Sprint(h.Status)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", isoTime(h.At), h.Attempt, h.Outcome, status,
			h.Duration.Round(100*time.Microsecond), h.Dispatcher, oneLine(h.Error, 120))
	}
	return w.Flush()
}

// isoTime is t in UTC, ISO 8601 to the millisecond: the one time format of
// the console and the command line.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func runRetryNow(ctx context.Context, e *env, args []string) error {
	c := newDBCommand(e, "retry-now", "retry-now ID...")
	if err := c.parseWithArgs(e, args); err != nil {
		return err
	}
	if len(c.Args()) == 0 {
		return usagef("retry-now: no ids given")
	}
	ids, err := parseIDs(c.Args())
	if err != nil {
		return err
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		moved, err := quietAdmin(a).RetryNow(ctx, "", ids...)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "made %d message(s) due now%s\n", len(moved), idList(moved))
		if missing := missingIDs(ids, moved); len(missing) > 0 {
			return fmt.Errorf("not waiting for a later attempt (being delivered, delivered, dead, due already, or not found): %s", joinIDs(missing))
		}
		return nil
	})
}
