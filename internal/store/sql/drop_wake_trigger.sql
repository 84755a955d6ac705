-- DropWakeTrigger: removes the wake-up trigger, so inserts no longer notify
-- (dispatchers find new rows by polling). Migrate creates it again.
DROP TRIGGER IF EXISTS {{wake_trigger}} ON {{table}}
