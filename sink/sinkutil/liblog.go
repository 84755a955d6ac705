package sinkutil

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
)

// LibraryLog routes the printf-style log of a client library into slog, so
// that its lines join the process's log stream (JSON included) instead of
// writing their own text to stderr. Each line becomes one record at the
// given level, with msg as its message and the library's text as the
// "detail" attribute. Client libraries keep their logger process-wide, so
// a LibraryLog is one per library: [LibraryLog.Use] points it at a logger,
// the last one given wins, and until then (or with none) lines are
// discarded.
type LibraryLog struct {
	msg    string
	level  slog.Level
	logger atomic.Pointer[slog.Logger]
}

// NewLibraryLog returns a LibraryLog writing records at level with message
// msg (e.g. "redissink: go-redis").
func NewLibraryLog(msg string, level slog.Level) *LibraryLog {
	return &LibraryLog{msg: msg, level: level}
}

// Use sends the library's lines to logger from now on. A nil logger is
// ignored.
func (l *LibraryLog) Use(logger *slog.Logger) {
	if logger != nil {
		l.logger.Store(logger)
	}
}

// Printf logs one line, as log.Logger.Printf would.
func (l *LibraryLog) Printf(format string, v ...any) {
	l.Log(context.Background(), fmt.Sprintf(format, v...))
}

// Println logs one line, as log.Logger.Println would.
func (l *LibraryLog) Println(v ...any) {
	l.Log(context.Background(), strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}

// Log logs one line of the library's text.
func (l *LibraryLog) Log(ctx context.Context, text string) {
	logger := l.logger.Load()
	if logger == nil || !logger.Enabled(ctx, l.level) {
		return
	}
	logger.Log(ctx, l.level, l.msg, slog.String("detail", strings.TrimSpace(text)))
}
