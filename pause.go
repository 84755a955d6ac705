package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outbox/internal/store"
)

// Pause is a destination an operator paused ([Admin.Pause]): until it is
// resumed, every dispatcher of the table holds its messages back, pending
// and with no attempt spent.
type Pause struct {
	// Route is the paused destination (a route's name, "default" for the
	// default sink); "" is the whole table.
	Route string `json:"route"`
	// By is who paused it, At since when, Reason why (may be empty).
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// Whole reports whether p pauses the whole table.
func (p Pause) Whole() bool { return p.Route == "" }

// Audit actions of pauses.
const (
	AuditPause  = "pause"
	AuditResume = "resume"
)

// ErrNotPaused reports a resume of a destination that is not paused.
var ErrNotPaused = errors.New("outbox: not paused")

// CheckPauseRoute refuses a name a pause cannot name: empty (the whole
// table is named by no route), over 200 bytes, not UTF-8, or with control
// characters. The command line and the console check with it too.
func CheckPauseRoute(route string) error {
	if route == "" || len(route) > 200 || !utf8.ValidString(route) || strings.ContainsFunc(route, unicode.IsControl) {
		return fmt.Errorf("route name %q must be 1 to 200 characters without control characters", route)
	}
	return nil
}

// CheckPauseReason refuses a pause's reason over 1,000 bytes or of more
// than one line.
func CheckPauseReason(reason string) error {
	if len(reason) > 1000 || strings.ContainsFunc(reason, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) {
		return errors.New("a pause's reason is at most 1000 characters on one line")
	}
	return nil
}

// Pause pauses the destination route of the table ("" the whole table),
// on every dispatcher within a poll interval (at once where they listen)
// and over their restarts, until [Admin.Resume]. actor names who asked
// (recorded with the pause and in the audit table), reason why. Pausing
// what is paused already changes nothing and returns the pause in force,
// with made false.
func (a *Admin) Pause(ctx context.Context, actor, route, reason string) (p Pause, made bool, err error) {
	if route != "" {
		if err := CheckPauseRoute(route); err != nil {
			return Pause{}, false, fmt.Errorf("outbox: pause: %w", err)
		}
	}
	if err := CheckPauseReason(reason); err != nil {
		return Pause{}, false, fmt.Errorf("outbox: pause: %w", err)
	}
	st, table, err := a.resolved(ctx, "pause")
	if err != nil {
		return Pause{}, false, err
	}
	entry := AuditEntry{Action: AuditPause, Actor: actor, Name: route, Filter: reasonTerms(reason)}
	auditID, err := a.auditStart(ctx, entry)
	if err != nil {
		return Pause{}, false, err
	}
	sp, made, err := st.SetPause(ctx, a.db, route, actor, reason)
	if err == nil {
		// A dispatcher that does not hear it reads the pauses again
		// within a poll interval of its own.
		_ = store.Notify(ctx, a.db, table.Channel(), store.NotifyPause)
	} else {
		err = fmt.Errorf("outbox: pause: %w", err)
	}
	var n int64
	if made {
		n = 1
	}
	entry.Count = n
	if aerr := a.auditEnd(ctx, auditID, entry, &n, err); aerr != nil && err == nil {
		err = aerr
	}
	return Pause(sp), made, err
}

// Resume lifts the pause of route ("" the whole table) and makes the
// messages held back for it due now; every dispatcher sends them within a
// poll interval (at once where they listen), in order per aggregate where
// the table is ordered. It returns the pause lifted and how many messages
// it woke (held back for any pause: those of a destination still paused
// are held back again), or ErrNotPaused. Audited like Pause.
func (a *Admin) Resume(ctx context.Context, actor, route string) (lifted Pause, woke int64, err error) {
	if route != "" {
		if err := CheckPauseRoute(route); err != nil {
			return Pause{}, 0, fmt.Errorf("outbox: resume: %w", err)
		}
	}
	st, table, err := a.resolved(ctx, "resume")
	if err != nil {
		return Pause{}, 0, err
	}
	entry := AuditEntry{Action: AuditResume, Actor: actor, Name: route}
	auditID, err := a.auditStart(ctx, entry)
	if err != nil {
		return Pause{}, 0, err
	}
	sp, ok, err := st.LiftPause(ctx, a.db, route)
	switch {
	case err != nil:
		err = fmt.Errorf("outbox: resume: %w", err)
	case !ok:
		err = ErrNotPaused
	default:
		woke, err = st.WakePaused(ctx, a.db)
		if err != nil {
			err = fmt.Errorf("outbox: resume: the pause is lifted, but its messages were not made due (they are within 15 minutes): %w", err)
		}
		// Dispatchers that hear it read the pauses again at once and
		// look again at what they knew to wait.
		_ = store.Notify(ctx, a.db, table.Channel(), store.NotifyPause)
	}
	entry.Count = woke
	if aerr := a.auditEnd(ctx, auditID, entry, &woke, err); aerr != nil && err == nil {
		err = aerr
	}
	return Pause(sp), woke, err
}

// Pauses lists the pauses in force on the table, the whole table's first.
func (a *Admin) Pauses(ctx context.Context) ([]Pause, error) {
	st, _, err := a.resolved(ctx, "pauses")
	if err != nil {
		return nil, err
	}
	ps, err := st.Pauses(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: pauses: %w", err)
	}
	return pausesOf(ps), nil
}

// sortPauses puts the whole table's pause first, then the routes' by name.
func sortPauses(ps []Pause) {
	slices.SortFunc(ps, func(a, b Pause) int { return strings.Compare(a.Route, b.Route) })
}

func pausesOf(ps []store.Pause) []Pause {
	out := make([]Pause, len(ps))
	for i, p := range ps {
		out[i] = Pause(p)
	}
	return out
}

// resolved is the store of the table as resolved (schema-qualified) and
// the table, for op's errors.
func (a *Admin) resolved(ctx context.Context, op string) (*store.Store, store.Table, error) {
	table, err := a.store.Resolve(ctx, a.db)
	if err != nil {
		return nil, table, fmt.Errorf("outbox: %s: %w", op, err)
	}
	return a.store.Qualified(table.Schema), table, nil
}

func reasonTerms(reason string) []string {
	if reason == "" {
		return nil
	}
	return []string{"reason=" + reason}
}
