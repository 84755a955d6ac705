//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Armed reports whether name has an action configured: never, here.
func Armed(string) bool { return false }

// Hit does nothing without the failpoints build tag.
func Hit(string) {}

// During does nothing without the failpoints build tag.
func During(string) func() { return func() {} }

// Error never injects anything without the failpoints build tag.
func Error(string) error { return nil }
