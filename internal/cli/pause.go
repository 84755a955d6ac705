package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxd/outbox"
)

// pauseTarget names what a pause or resume acts on, for its output.
func pauseTarget(table, route string) string {
	if route == "" {
		return "table " + table
	}
	return fmt.Sprintf("route %q of %s", route, table)
}

// pauseLine describes a pause in force: by whom, since when, why.
func pauseLine(p outbox.Pause) string {
	s := fmt.Sprintf("by %s since %s", p.By, isoTime(p.At))
	if p.Reason != "" {
		s += fmt.Sprintf(" (%s)", p.Reason)
	}
	return s
}

func runPause(ctx context.Context, e *env, args []string) error {
	var route, reason string
	var asJSON bool
	c := newDBCommand(e, "pause", "pause [--table T] [--route NAME] [--reason TEXT] [--json]")
	c.StringVar(&route, "route", "", `the destination to pause: a route's name, "default" for the default sink (default: the whole table)`)
	c.StringVar(&reason, "reason", "", "why, shown with the pause (status, console, audit)")
	c.BoolVar(&asJSON, "json", false, "print the pause in force as JSON")
	if err := c.parse(e, args); err != nil {
		return err
	}
	if err := checkPauseRoute(c, route); err != nil {
		return err
	}
	if err := outbox.CheckPauseReason(reason); err != nil {
		return usagef("--reason: %v", err)
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		p, made, err := quietAdmin(a).Pause(ctx, actor(e), route, reason)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(e.stdout, struct {
				outbox.Pause
				Made bool `json:"made"`
			}{p, made})
		}
		what := pauseTarget(c.db.table, route)
		if made {
			fmt.Fprintf(e.stdout, "paused %s %s: its messages wait, pending, until `outboxd resume`\n", what, pauseLine(p))
		} else {
			fmt.Fprintf(e.stdout, "%s was paused already %s; unchanged\n", what, pauseLine(p))
		}
		return nil
	})
}

func runResume(ctx context.Context, e *env, args []string) error {
	var route string
	var asJSON bool
	c := newDBCommand(e, "resume", "resume [--table T] [--route NAME] [--json]")
	c.StringVar(&route, "route", "", `the destination to resume: a route's name, "default" for the default sink (default: the whole table)`)
	c.BoolVar(&asJSON, "json", false, "print the pause lifted and the messages made due as JSON")
	if err := c.parse(e, args); err != nil {
		return err
	}
	if err := checkPauseRoute(c, route); err != nil {
		return err
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		p, woke, err := quietAdmin(a).Resume(ctx, actor(e), route)
		if errors.Is(err, outbox.ErrNotPaused) {
			return fmt.Errorf("resume: %s is not paused", pauseTarget(c.db.table, route))
		}
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(e.stdout, struct {
				Lifted outbox.Pause `json:"lifted"`
				Woke   int64        `json:"woke"`
			}{p, woke})
		}
		fmt.Fprintf(e.stdout, "resumed %s (paused %s); %d held %s made due\n",
			pauseTarget(c.db.table, route), pauseLine(p), woke, plural(woke, "message", "messages"))
		return nil
	})
}

// checkPauseRoute refuses a --route a pause cannot name.
func checkPauseRoute(c *dbCommand, route string) error {
	if !c.Changed("route") {
		return nil
	}
	if err := outbox.CheckPauseRoute(route); err != nil {
		return usagef("--route: %v (leave --route out to act on the whole table)", err)
	}
	return nil
}
