-- Migration 002: producer-supplied metadata carried to the sinks as is
-- (trace context such as traceparent, correlation ids). NULL when there are
-- none. Adding a nullable column without a default rewrites nothing, but
-- still takes an ACCESS EXCLUSIVE lock for an instant.

-- step: headers column
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                 AND a.attname = 'headers' AND NOT a.attisdropped)
-- apply:
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS headers jsonb;
