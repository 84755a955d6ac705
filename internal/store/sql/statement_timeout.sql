-- StatementTimeout: bound the statements of the current transaction to $1
-- milliseconds (SET LOCAL statement_timeout, with the value a parameter).
SELECT set_config('statement_timeout', $1, true)
