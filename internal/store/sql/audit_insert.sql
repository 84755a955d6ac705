-- AuditInsert: the record of one operator write, before it starts (count 0,
-- finished_at NULL) or, for a dry run, complete. $1 actor, $2 action,
-- $3 name (NULL for none), $4 filter terms, $5 count, $6 dry run, $7 finished.
INSERT INTO {{audit}} (actor, action, name, filter, count, dry_run, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::boolean THEN now() END)
RETURNING id
