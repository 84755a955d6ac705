package console

import "fmt"

// requestError is a client error: the request's input is wrong (400).
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func errorf(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}
