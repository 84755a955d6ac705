-- The highest id in the table and the database's clock: the bound a bulk
-- action's preview pins the action to (a primary-key probe).
SELECT coalesce(max(id), 0), now() FROM {{table}}
