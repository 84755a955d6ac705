-- A dispatcher that stops deletes its row. $1 owner.
DELETE FROM {{dispatchers}} WHERE owner = $1
