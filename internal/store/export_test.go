package store

// ClaimSQL returns the claim statement as Claim runs it, for plan tests.
func (s *Store) ClaimSQL(ordered bool) string {
	if ordered {
		return s.claimOrdered
	}
	return s.claim
}

// UndeliveredSQL returns the statement Undelivered runs, for plan tests.
func (s *Store) UndeliveredSQL() string { return s.undelivered }

// FinalizeSQL returns the statement Finalize runs, for plan tests.
func (s *Store) FinalizeSQL() string { return s.finalize }

// BreakdownSQL returns the statement BreakdownBy runs, for plan tests.
func (s *Store) BreakdownSQL() string { return s.console.breakdownEvent }

// OwnersSQL returns the statement Owners runs, for plan tests.
func (s *Store) OwnersSQL() string { return s.console.owners }

// PurgeSQL returns the statement PurgeBatch runs, for plan tests.
func (s *Store) PurgeSQL() string { return s.purge }

// StatusSQL is the statement Status runs ($1: the quoted table name).
func (s *Store) StatusSQL() string { return s.status }

// ShardReadSQL is the shard-lease read, for its plan test.
func (s *Store) ShardReadSQL() string { return s.shards.read }

// ShardFinalizeSQL is the shard-lease finalize, for its plan test.
func (s *Store) ShardFinalizeSQL() string { return s.shards.finalize }

// ReadsFromFront reads each of held from the front, up to perShard rows.
func ReadsFromFront(held []ShardLease, perShard int) []ShardRead {
	out := make([]ShardRead, len(held))
	for i, l := range held {
		out[i] = ShardRead{ShardLease: l, Limit: perShard}
	}
	return out
}

// HeartbeatSQL returns the heartbeat statement, for plan tests.
func (s *Store) HeartbeatSQL() string { return s.heartbeat }

// CursorSQL are the snapshot-cursor statements, for their plan tests.
func (s *Store) CursorSQL() (load, fetch, parked, advance string) {
	return s.cursor.load, s.cursor.fetch, s.cursor.parked, s.cursor.advance
}

// CursorBulkSQL returns the statement a bulk batch runs on a table under
// snapshot cursors, with its arguments.
func (s *Store) CursorBulkSQL(action Action, p BatchParams) (string, []any, error) {
	return bulkSQL(&s.cursorConsole, action, p)
}

// CursorConsoleSQL returns the console's page, dead-filter page and
// breakdown statements for a table under snapshot cursors.
func (s *Store) CursorConsoleSQL() (page, dead, breakdown string) {
	c := &s.cursorConsole
	pageQ, _, _ := messagesSQL(c, Filter{}, Page{Limit: 50, Desc: true})
	deadQ, _, _ := messagesSQL(c, Filter{Status: []string{"dead"}}, Page{Limit: 50, Desc: true})
	return pageQ, deadQ, c.breakdownAggregate
}
