package httpsink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/httpsink"
)

var retryAfterNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	tests := []struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"120", 120 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"0", 0, true},
		{"86400", 24 * time.Hour, true},
		{"86401", httpsink.MaxRetryAfter, true},
		{"99999999999999999999999999", httpsink.MaxRetryAfter, true},
		{"Sun, 01 Jun 2025 12:01:30 GMT", 90 * time.Second, true},
		{"Sunday, 01-Jun-25 12:00:05 GMT", 5 * time.Second, true}, // RFC 850
		{"Sun Jun  1 13:00:00 2025", time.Hour, true},             // ANSI C asctime
		{"Sat, 31 May 2025 12:00:00 GMT", 0, true},                // past: now
		{"Fri, 31 Dec 9999 23:59:59 GMT", httpsink.MaxRetryAfter, true},
		{"", 0, false},
		{"   ", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"2025-06-01T12:01:00Z", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			t.Parallel()

			got, ok := httpsink.ParseRetryAfter(tt.value, retryAfterNow)

			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{
		"120", "0", "", "-1", "18446744073709551616", "1e3",
		"Sun, 01 Jun 2025 12:01:30 GMT", "Sunday, 01-Jun-25 12:00:05 GMT",
		"Sun Jun  1 13:00:00 2025", "Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, ok := httpsink.ParseRetryAfter(value, retryAfterNow)

		require.GreaterOrEqual(t, got, time.Duration(0))
		require.LessOrEqual(t, got, httpsink.MaxRetryAfter)
		if !ok {
			require.Zero(t, got)
		}
	})
}
