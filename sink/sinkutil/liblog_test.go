package sinkutil_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/sinkutil"
)

func TestLibraryLog(t *testing.T) {
	t.Parallel()
	l := sinkutil.NewLibraryLog("x: lib", slog.LevelWarn)
	l.Printf("dropped: %d", 1) // no logger yet: discarded, no panic

	var first, second bytes.Buffer
	l.Use(slog.New(slog.NewJSONHandler(&first, nil)))
	l.Printf("dial %s failed\n", "h:1")
	l.Println("closing", "session", 7)
	l.Use(nil) // ignored
	l.Use(slog.New(slog.NewJSONHandler(&second, &slog.HandlerOptions{Level: slog.LevelError})))
	l.Printf("below the level") // the new logger wins, and filters by level

	var got []map[string]any
	for line := range strings.Lines(first.String()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		delete(rec, "time")
		got = append(got, rec)
	}
	require.Equal(t, []map[string]any{
		{"level": "WARN", "msg": "x: lib", "detail": "dial h:1 failed"},
		{"level": "WARN", "msg": "x: lib", "detail": "closing session 7"},
	}, got)
	require.Empty(t, second.String())
}
