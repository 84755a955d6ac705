package lease

import (
	"testing"

	"github.com/outboxd/outbox/internal/testdb"
)

// TestMain checks for leaked goroutines; the tests named Unit need no
// database, the others a PostgreSQL (internal/testdb).
func TestMain(m *testing.M) { testdb.Main(m) }
