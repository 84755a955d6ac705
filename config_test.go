package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

func TestConfigError(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, field, other string
		cfg                outbox.Config
	}{
		{"NegativeFetchCooldown", "FetchCooldown", "", outbox.Config{FetchCooldown: -time.Second}},
		{"NegativeWorkers", "Workers", "", outbox.Config{Workers: -1}},
		{"NegativeRetryBase", "RetryBase", "", outbox.Config{RetryBase: -time.Second}},
		{"NegativeRetryCap", "RetryCap", "", outbox.Config{RetryCap: -time.Second}},
		{"PublishTimeoutOverHalfLease", "PublishTimeout", "Lease", outbox.Config{Lease: 10 * time.Second, PublishTimeout: 6 * time.Second}},
		{"HeartbeatOverThirdOfLease", "HeartbeatInterval", "Lease", outbox.Config{Lease: time.Second, HeartbeatInterval: 500 * time.Millisecond}},
		{"RetryCapUnderBase", "RetryCap", "RetryBase", outbox.Config{RetryBase: 2 * time.Second, RetryCap: time.Second}},
		{"NamespaceWithColon", "IDNamespace", "", outbox.Config{IDNamespace: "orders:eu"}},
		{"NamespaceWithSpace", "IDNamespace", "", outbox.Config{IDNamespace: "my orders"}},
		{"NamespaceTooLong", "IDNamespace", "", outbox.Config{IDNamespace: strings.Repeat("n", 65)}},
		{"NegativeDeferMaxAge", "DeferMaxAge", "", outbox.Config{DeferMaxAge: -time.Second}},
		// Past the upper bounds: a typo, not a setting.
		{"AbsurdBatch", "BatchSize", "", outbox.Config{BatchSize: 1_000_000}},
		{"AbsurdWorkers", "Workers", "", outbox.Config{Workers: 100_000}},
		{"AbsurdMaxAttempts", "MaxAttempts", "", outbox.Config{MaxAttempts: 1_000_000}},
		{"AbsurdLease", "Lease", "", outbox.Config{Lease: 60000 * time.Hour}},
		{"AbsurdPollInterval", "PollInterval", "", outbox.Config{PollInterval: 1000 * time.Hour}},
		{"AbsurdFetchCooldown", "FetchCooldown", "", outbox.Config{FetchCooldown: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.WithDefaults().Validate()
			require.True(t, outbox.IsConfigError(err), "%v", err)
			var ce *outbox.ConfigError
			require.True(t, errors.As(fmt.Errorf("wrapped: %w", err), &ce))
			require.Equal(t, tc.field, ce.Field)
			require.Equal(t, tc.other, ce.Other)
			require.True(t, strings.HasPrefix(err.Error(), tc.field+" "), "%v", err)
			rename := func(f string) string { return "--" + strings.ToLower(f) }
			described := ce.Describe(rename)
			require.True(t, strings.HasPrefix(described, rename(tc.field)+" "), described)
			require.NotContains(t, described, tc.field, "a Go field name in %q", described)
			if tc.other != "" {
				require.Contains(t, described, rename(tc.other))
				require.NotContains(t, described, tc.other)
			}
		})
	}

	t.Run("NoDeferMaxAgeIsValid", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, (&outbox.Config{DeferMaxAge: outbox.NoDeferMaxAge}).WithDefaults().Validate())
	})

	t.Run("ZeroRetryBaseMeansDefault", func(t *testing.T) {
		t.Parallel()
		c := (&outbox.Config{RetryBase: 0}).WithDefaults()
		require.NoError(t, c.Validate())
		require.Equal(t, outbox.RetryBaseDefault, c.RetryBase)
	})
}

// An unset publish timeout follows a short lease instead of refusing it;
// only an explicit timeout can conflict with the lease.
func TestPublishTimeoutDefaultFollowsLease(t *testing.T) {
	t.Parallel()

	c := (&outbox.Config{Lease: 2 * time.Second}).WithDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, time.Second, c.PublishTimeout)

	c = (&outbox.Config{Lease: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond}).WithDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, time.Second, c.PublishTimeout)

	c = (&outbox.Config{}).WithDefaults()
	require.Equal(t, outbox.PublishTimeoutDefault, c.PublishTimeout, "a long lease keeps the default")

	err := (&outbox.Config{Lease: 2 * time.Second, PublishTimeout: 1500 * time.Millisecond}).WithDefaults().Validate()
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "PublishTimeout", ce.Field)
}

// The batch defaults by lease mode; a batch set is kept in either.
func TestBatchSizeDefaultFollowsLeaseMode(t *testing.T) {
	t.Parallel()
	require.Equal(t, outbox.BatchSizeDefault, (&outbox.Config{}).WithDefaults().BatchSize)
	require.Equal(t, outbox.BatchSizeShardsDefault, (&outbox.Config{LeaseMode: outbox.LeaseShards}).WithDefaults().BatchSize)
	require.Equal(t, 50, (&outbox.Config{LeaseMode: outbox.LeaseShards, BatchSize: 50}).WithDefaults().BatchSize)
	require.Equal(t, 1000, (&outbox.Config{LeaseMode: outbox.LeaseCursor}).WithDefaults().BatchSize)
	require.Equal(t, 50, (&outbox.Config{LeaseMode: outbox.LeaseCursor, BatchSize: 50}).WithDefaults().BatchSize)
}
