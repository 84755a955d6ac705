-- Record: claim (consumer $1, message $2) for this transaction. One row
-- affected means it is new; zero means a committed transaction already
-- recorded it. A concurrent uncommitted insert of the same key makes this
-- statement wait for that transaction's outcome.
INSERT INTO {{table}} (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING
