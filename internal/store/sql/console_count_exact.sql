-- CountExact: every matching row, on request; {{where}} from $1. With a
-- status term of the undelivered or dead sets it reads their partial index;
-- over done rows it reads the table (a parallel sequential scan).
SELECT count(*) FROM {{rows}}
WHERE {{where}}
