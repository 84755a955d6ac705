// Package jsonout writes the JSON documents outboxd prints and serves, so the
// command line and the console's API produce the same bytes for the same value
// (`outboxd status --json` and `GET /api/v1/status` are one shape).
package jsonout

import (
	"encoding/json"
	"io"
)

// Write encodes v as indented JSON (two spaces) followed by a newline.
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
