package stdoutsink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/stdoutsink"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"stdout", "stdout:", "STDOUT:"} {
		require.NoError(t, stdoutsink.CheckURL(good), good)
	}
	require.EqualError(t, stdoutsink.CheckURL("stdot"), "stdoutsink: URL has no scheme; want \"stdout:\"")
	err := stdoutsink.CheckURL("http://u:s3cr3t@h")
	require.EqualError(t, err, `stdoutsink: unsupported URL scheme "http"; want stdout`)
}
