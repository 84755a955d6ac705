-- Headers: producer-supplied metadata carried to the sinks as is (trace
-- context such as traceparent, correlation ids). NULL when there are none.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS headers jsonb;
