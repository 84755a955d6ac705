-- Migrate: the inbox table and its retention index. Every statement is
-- idempotent; the caller holds an advisory lock so concurrent migrations of
-- the same table serialise (CREATE ... IF NOT EXISTS alone races on the
-- catalog).
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer    text NOT NULL,
    message_id  text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- Purge walks ids by age.
CREATE INDEX IF NOT EXISTS {{received_index}} ON {{table}} (received_at);
