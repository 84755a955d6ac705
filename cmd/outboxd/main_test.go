package main_test

import (
	"testing"

	"github.com/outboxd/outbox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
