-- Fetch the rows of a window batch by primary key, in the order given
-- (a lateral probe per id: a join on the ids can be planned as a hash
-- join over the whole table). Ordered ($2), each row says whether its
-- aggregate has an earlier parked message (it is then held back behind it).
-- $1 ids, $2 ordered.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
       o.created_at, 0, o.headers::text, o.uid::text, o.shard, now(),
       $2::boolean AND EXISTS (SELECT 1 FROM {{parked}} AS p
                               WHERE p.aggregate_id = o.aggregate_id AND p.id < o.id)
FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, n)
JOIN LATERAL (SELECT * FROM {{table}} AS o WHERE o.id = u.id) AS o ON true
ORDER BY u.n
