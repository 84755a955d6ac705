package outbox

import (
	"errors"
	"fmt"
)

// ConfigError reports an invalid [Config] field. Field is the Go name of the
// field at fault; Other, when set, the field the rule relates it to (Lease
// for a PublishTimeout over half the Lease). Programs that expose Config
// under other names (a CLI's flags) render the error with [ConfigError.Describe].
type ConfigError struct {
	Field string
	Other string
	// Reason is what is wrong, after the field's name: "must not be
	// negative, got -1s".
	Reason string

	// rule is Reason with a %[1]s where Other's name goes.
	rule string
}

func (e *ConfigError) Error() string { return e.Describe(func(field string) string { return field }) }

// Describe renders the error with each field named by name, e.g. the flag
// that sets it.
func (e *ConfigError) Describe(name func(field string) string) string {
	if e.Other == "" {
		return name(e.Field) + " " + e.Reason
	}
	return name(e.Field) + " " + fmt.Sprintf(e.rule, name(e.Other))
}

// IsConfigError reports whether err is, or wraps, a [ConfigError].
func IsConfigError(err error) bool {
	var e *ConfigError
	return errors.As(err, &e)
}

// invalid builds a ConfigError about one field.
func invalid(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// conflict builds a ConfigError about field relative to other: format
// names other as %[1]s and args as %[2]s on.
func conflict(field, other, format string, args ...any) *ConfigError {
	rule := fmt.Sprintf(format, append([]any{"%[1]s"}, args...)...)
	return &ConfigError{Field: field, Other: other, Reason: fmt.Sprintf(rule, other), rule: rule}
}
