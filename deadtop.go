package outbox

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DeadTop is the dead letters grouped by what went wrong ([Admin.DeadTop]).
type DeadTop struct {
	// Scanned is how many dead messages were read, the newest first; More
	// is set when there are older ones that were not.
	Scanned int64       `json:"scanned"`
	More    bool        `json:"more"`
	Groups  []DeadGroup `json:"groups"`
}

// DeadGroup is the dead messages of one event type whose errors have one
// shape: the same text once the parts that differ from message to message
// (URLs, UUIDs, hexadecimal ids, numbers) are folded.
type DeadGroup struct {
	Count     int64  `json:"count"`
	EventType string `json:"event_type"`
	// Shape is the folded error text; Sample the newest message's own.
	Shape  string `json:"shape"`
	Sample string `json:"sample"`
	// NewestID and OldestID bound the group among the messages read.
	NewestID int64 `json:"newest_id"`
	OldestID int64 `json:"oldest_id"`
	// Filter selects the group for `outboxd dead retry|skip --filter`
	// (and the console's filter): status, event type and, when the shape
	// has one, its longest literal run as an error substring. It may match
	// a few messages of other shapes that contain that run: preview with
	// --dry-run.
	Filter []string `json:"filter"`
}

// DeadTopScanDefault is how many dead messages [Admin.DeadTop] reads when
// told 0.
const DeadTopScanDefault = 10_000

// DeadTop reads up to scan of the newest dead messages (DeadTopScanDefault
// when 0) and groups them by event type and error shape, the largest group
// first, at most limit groups (all when 0). It reads through the dead
// messages' index, a page at a time, without their payloads.
func (a *Admin) DeadTop(ctx context.Context, limit, scan int) (*DeadTop, error) {
	if scan <= 0 {
		scan = DeadTopScanDefault
	}
	type key struct{ event, shape string }
	groups := map[key]*DeadGroup{}
	out := &DeadTop{}
	page := Page{Desc: true, Limit: PageLimitMax}
	for {
		page.Limit = min(PageLimitMax, scan-int(out.Scanned))
		rows, next, err := a.Messages(ctx, Filter{Status: []string{"dead"}}, page)
		if err != nil {
			return nil, fmt.Errorf("outbox: dead top: %w", err)
		}
		for _, m := range rows {
			out.Scanned++
			text := ""
			if m.LastError != nil {
				text = *m.LastError
			}
			k := key{m.EventType, ErrorShape(text)}
			g := groups[k]
			if g == nil {
				g = &DeadGroup{EventType: m.EventType, Shape: k.shape, Sample: text, NewestID: m.ID}
				groups[k] = g
			}
			g.Count++
			g.OldestID = m.ID
		}
		if next == 0 {
			break
		}
		if int(out.Scanned) >= scan {
			out.More = true
			break
		}
		page.After = next
	}
	out.Groups = make([]DeadGroup, 0, len(groups))
	for _, g := range groups {
		g.Filter = groupFilter(g.EventType, g.Shape)
		out.Groups = append(out.Groups, *g)
	}
	slices.SortFunc(out.Groups, func(x, y DeadGroup) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(y.NewestID, x.NewestID))
	})
	if limit > 0 && len(out.Groups) > limit {
		out.Groups = out.Groups[:limit]
	}
	return out, nil
}

// The parts of an error text folded by ErrorShape, in the order they are
// replaced: a URL may hold a UUID, a UUID hex runs and numbers.
var shapeFolds = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]*[^\s"'<>:;,.)\]]`), "<url>"},
	{regexp.MustCompile(`\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b`), "<uuid>"},
	{regexp.MustCompile(`\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b(?:0x)?[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`), "<hex>"},
	{regexp.MustCompile(`\d+(?:\.\d+)?`), "<n>"},
	{regexp.MustCompile(`\s+`), " "},
}

// shapeMax bounds a shape's length, in bytes.
const shapeMax = 200

// ErrorShape folds the parts of an error text that differ from one message
// to the next while the cause is the same: URLs to <url>, UUIDs to <uuid>,
// runs of hexadecimal digits with both digits and letters to <hex>,
// numbers to <n>, runs of white space to one space. "" stays "".
func ErrorShape(text string) string {
	s := text
	for _, f := range shapeFolds {
		s = f.re.ReplaceAllString(s, f.with)
	}
	s = strings.TrimSpace(s)
	if len(s) > shapeMax {
		s = strings.ToValidUTF8(s[:shapeMax], "") + "…"
	}
	return s
}

var placeholder = regexp.MustCompile(`<(?:url|uuid|hex|n)>|…`)

// groupFilter is the filter that selects a group, as terms: its status,
// its event type and the longest literal run of its shape as an error
// substring (none when no run has a letter).
func groupFilter(eventType, shape string) []string {
	best := ""
	for _, run := range placeholder.Split(shape, -1) {
		run = strings.TrimSpace(run)
		if len(run) > len(best) && strings.IndexFunc(run, func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }) >= 0 {
			best = run
		}
	}
	return Filter{Status: []string{"dead"}, EventType: eventType, ErrorContains: best}.Terms()
}
