package cli

import (
	"errors"
	"reflect"
	"testing"
	"time"

	flag "github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// TestConfigErrorNamesTheFlag checks the field -> flag table the run flags
// build: every annotated field is an outbox.Config field, and a
// *outbox.ConfigError from the library's Validate is rendered with the
// flags that set its fields.
func TestConfigErrorNamesTheFlag(t *testing.T) {
	t.Parallel()
	e := &env{}
	s := newRunSetup(e, "run", "run")
	cfgType := reflect.TypeFor[outbox.Config]()
	n := 0
	s.fs.VisitAll(func(f *flag.Flag) {
		v := f.Annotations[configFieldAnnotation]
		if len(v) == 0 {
			return
		}
		n++
		_, ok := cfgType.FieldByName(v[0])
		require.True(t, ok, "--%s names %q, not an outbox.Config field", f.Name, v[0])
	})
	require.Equal(t, 20, n, "flags that set a Config field")

	s.rf.retryBase, s.rf.retryCap = 2*time.Second, time.Second
	_, err := s.rf.config("outbox", nil)
	require.Error(t, err)
	var ue *usageError
	require.True(t, errors.As(err, &ue))
	require.Regexp(t, `^--retry-cap .*--retry-base`, err.Error())

	// The library's own error names the Go fields and carries no flag.
	libErr := (&outbox.Config{RetryBase: 2 * time.Second, RetryCap: time.Second}).WithDefaults().Validate()
	var ce *outbox.ConfigError
	require.True(t, errors.As(libErr, &ce))
	require.Equal(t, "RetryCap", ce.Field)
	require.Equal(t, "RetryBase", ce.Other)
	require.NotContains(t, libErr.Error(), "--")
	require.Equal(t, ce.Describe(func(field string) string { return flagFor(s.fs, field) }), err.Error())

	// --defer-max-age 0 is the library's no limit; a negative one is the
	// library's ConfigError, named by the flag.
	s.rf.retryBase, s.rf.retryCap = 0, 0
	s.rf.deferMaxAge = 0
	cfg, err := s.rf.config("outbox", nil)
	require.NoError(t, err)
	require.Equal(t, outbox.NoDeferMaxAge, cfg.DeferMaxAge)
	s.rf.deferMaxAge = -time.Second
	_, err = s.rf.config("outbox", nil)
	require.True(t, errors.As(err, &ue), "a usage error")
	require.True(t, errors.As(err, &ce), "the library's ConfigError")
	require.Equal(t, "DeferMaxAge", ce.Field)
	require.Equal(t, "--defer-max-age must not be negative, got -1s", err.Error())

	s.rf.deferMaxAge = outbox.DeferMaxAgeDefault
	s.rf.workers = -1
	_, err = s.rf.config("outbox", nil)
	require.Regexp(t, `^--workers `, err.Error())
	require.Equal(t, "Unknown", flagFor(s.fs, "Unknown"))
}
