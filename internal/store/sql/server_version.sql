-- The server's version, as server_version_num (150020 for 15.20).
SELECT current_setting('server_version_num')::int
