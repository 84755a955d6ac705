package mqttsink_test

import (
	"testing"

	"github.com/outboxd/outbox/internal/testdb"
)

// testdb.Main: the credential test runs a dispatcher on a real table. It
// checks for leaked goroutines as goleak.VerifyTestMain did.
func TestMain(m *testing.M) { testdb.Main(m) }
