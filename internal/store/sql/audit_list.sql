-- AuditList: the newest $1 audit rows, by primary key backwards.
SELECT at, finished_at, actor, action, coalesce(name, ''), filter, count, dry_run
FROM {{audit}}
ORDER BY id DESC
LIMIT $1
