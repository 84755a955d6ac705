package stdoutsink

import (
	"errors"
	"fmt"
	"strings"
)

// The sink writes to an io.Writer and takes no URL of its own; the daemon
// names it "stdout:" (or "stdout"). It has no reserved-header set: a
// message's headers are written as the line's "headers" object, beside the
// fields the sink writes, never in place of one.

// CheckURL reports whether rawURL names this sink: "stdout" or a URL with
// the scheme stdout (whatever follows the scheme is not used).
func CheckURL(rawURL string) error {
	scheme, _, ok := strings.Cut(rawURL, ":")
	switch {
	case rawURL == "stdout":
		return nil
	case !ok || scheme == "":
		return errors.New("stdoutsink: URL has no scheme; want \"stdout:\"")
	case !strings.EqualFold(scheme, "stdout"):
		return fmt.Errorf("stdoutsink: unsupported URL scheme %q; want stdout", scheme)
	}
	return nil
}
