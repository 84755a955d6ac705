-- Whether the table has a parked table (snapshot cursors enabled): $1 its
-- quoted name.
SELECT to_regclass($1) IS NOT NULL
