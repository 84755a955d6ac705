//go:build chaos

package chaos

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
)

// Fault classes beyond the base menu of faults_test.go. A class is in the
// default draw once outboxd handles it; CHAOS_CLASSES changes the set for a
// run: a comma-separated list of class names to add, "all" for every
// class, "-name" to leave one out (CHAOS_CLASSES=all,-migrate).
const (
	// classSinkBadText: the webhook answers 5xx with a body of arbitrary
	// bytes (NUL, invalid UTF-8, control characters, 64 KiB and more).
	classSinkBadText = "sink_badtext"
	// classErrorText: a publish fails with an error text of arbitrary
	// bytes before reaching the sink, as a custom sink's
	// fmt.Errorf("...%s", body) would (failpoint publish-error).
	classErrorText = "error_text"
	// classSinkAuth: a credential rotated mid-run and restored later: the
	// webhook answers every request (of every worker, or of one) 401 or
	// 403 for a window; in the NATS variant the worker's broker link is
	// reset and reconnects meet "Authorization Violation".
	classSinkAuth = "sink_auth"
	// classSinkReject: the webhook refuses a few requests of the unordered
	// table with 422, a permanent refusal of the message: those end dead,
	// legitimately (falsely_dead must not count them).
	classSinkReject = "sink_reject"
	// classPublishHang: with heartbeats on, a publish blocks ignoring its
	// context, for longer than the lease or until the process is killed
	// (failpoint publish-hang).
	classPublishHang = "publish_hang"
	// classMigrate: `outboxd migrate` re-run while producers and workers
	// are busy.
	classMigrate = "migrate"
	// classSearchPath: the unordered table is migrated by its bare name
	// under the migrator's search_path, and two of its producers connect
	// with another one (one without the table's schema, one with a
	// same-named waiters table earlier on the path).
	classSearchPath = "search_path"
	// classAuthHeal: after the drain, every worker's credential is refused
	// while a batch is written, until each worker has paused, then healed:
	// the batch must arrive within a few probe intervals.
	classAuthHeal = "auth_heal"
	// classOrderedRun: the ordered table's workers poll rarely, so a head
	// finalized under `run` must wake the fetcher; after the drain a burst
	// on one aggregate is timed.
	classOrderedRun = "ordered_run"
	// classFailover: the database fails over: a synchronous streaming
	// standby is started, the primary killed and the standby promoted,
	// while every link (the workers', the producers') moves to it, as a
	// virtual IP or a DNS name does.
	classFailover = "failover"
)

var allClasses = []string{classSinkBadText, classErrorText, classSinkAuth, classSinkReject,
	classPublishHang, classMigrate, classSearchPath, classOrderedRun, classAuthHeal, classFailover}

// defaultClasses are drawn by every run unless CHAOS_CLASSES leaves them
// out: every class, since outboxd handles each of them.
var defaultClasses = allClasses

type classSet map[string]bool

func (c classSet) has(name string) bool { return c[name] }

func (c classSet) String() string {
	var out []string
	for k, on := range c {
		if on {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// parseClasses applies a CHAOS_CLASSES value to the default set.
func parseClasses(v string) (classSet, error) {
	c := classSet{}
	for _, k := range defaultClasses {
		c[k] = true
	}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		on := !strings.HasPrefix(item, "-")
		name := strings.TrimPrefix(strings.TrimPrefix(item, "-"), "+")
		switch {
		case name == "":
		case name == "all":
			for _, k := range allClasses {
				c[k] = on
			}
		case slices.Contains(allClasses, name):
			c[name] = on
		default:
			return nil, fmt.Errorf("CHAOS_CLASSES: unknown class %q (known: all, %s)", name, strings.Join(allClasses, ", "))
		}
	}
	return c, nil
}

// classesFromEnv returns the run's classes, from CHAOS_CLASSES.
func classesFromEnv() (classSet, error) { return parseClasses(os.Getenv("CHAOS_CLASSES")) }

// menuFor is a menu with the scheduled faults of the enabled classes
// added (classes armed through failpoints or changing the set-up are not
// scheduled). httpSink says whether the webhook's own faults apply.
func menuFor(base []weightedFault, c classSet, httpSink bool) []weightedFault {
	out := append([]weightedFault(nil), base...)
	if httpSink && c.has(classSinkBadText) {
		out = append(out, weightedFault{faultSinkBadText, 2})
	}
	if c.has(classSinkAuth) {
		out = append(out, weightedFault{faultSinkAuth, 2})
	}
	if httpSink && c.has(classSinkReject) {
		out = append(out, weightedFault{faultSinkReject, 1})
	}
	if c.has(classMigrate) {
		out = append(out, weightedFault{faultMigrate, 2})
	}
	if c.has(classFailover) {
		out = append(out, weightedFault{faultFailover, 1})
	}
	return out
}
