DELETE FROM {{waiters}} WHERE owner = $1
