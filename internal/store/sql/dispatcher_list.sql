-- The live dispatchers: those seen within three of their beats.
SELECT owner, host, version, lease_mode, started_at, last_seen, in_flight, delivered_1m, flow::text
FROM {{dispatchers}}
WHERE last_seen > now() - 3 * beat_us * interval '1 microsecond'
ORDER BY owner
