package spelling_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/spelling"
)

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"event_type", "event_type", 0},
		{"evnt_type", "event_type", 1}, {"statsu", "status", 2}, {"kitten", "sitting", 3},
	} {
		require.Equal(t, tc.want, spelling.Distance(tc.a, tc.b), "%q %q", tc.a, tc.b)
		require.Equal(t, tc.want, spelling.Distance(tc.b, tc.a), "%q %q", tc.b, tc.a)
	}
}
