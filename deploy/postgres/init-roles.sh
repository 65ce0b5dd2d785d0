#!/bin/sh
# Run by the postgres image once, when it initialises an empty data directory: the agents' role,
# able to log in with the password of its secret file. What it may do is granted by paritybot's
# migrations (`paritybot db upgrade`), which create it without a login where it does not exist.
set -eu
password="$(cat "${PARITYBOT_SECRETS_DIR:-/run/secrets}/paritybot_db_agent_password")"
# psql's variables quote the password: no value is pasted into SQL.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -v password="$password" <<'SQL'
CREATE ROLE paritybot_agent LOGIN PASSWORD :'password';
SQL
