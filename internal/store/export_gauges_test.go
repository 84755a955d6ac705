package store

// GaugesSQL returns the statement Gauges runs, for plan tests.
func (s *Store) GaugesSQL() string { return s.gauges }
