-- Created at: each delivered row's created_at, to pair with its arrival.
SELECT id, created_at FROM {{table}} WHERE id = ANY($1)
