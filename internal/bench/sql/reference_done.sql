-- Reference done: the article's per-row fenced mark_done, one commit per message.
UPDATE {{table}}
SET status = 'done', done_at = now(), last_error = NULL, lease_owner = NULL, lease_until = NULL
WHERE id = $1 AND status = 'processing' AND lease_version = $2
