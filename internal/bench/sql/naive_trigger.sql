-- Naive trigger: the per-row pg_notify a wake-up is often first written as,
-- for reference against the outbox's own trigger (which it replaces).
CREATE FUNCTION {{naive_function}}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('naive', NEW.id::text); RETURN NULL; END $$;
CREATE TRIGGER naive AFTER INSERT ON {{table}} FOR EACH ROW EXECUTE FUNCTION {{naive_function}}()
