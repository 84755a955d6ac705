// Package testio holds I/O helpers for the test suites.
package testio

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that may be written by one goroutine (a
// process's output, a logger) while another reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
