#!/bin/sh
# Run by the postgres image once, when it initialises an empty data directory: the login roles of
# `serve` and of the agents, with the passwords in their secret files. What each role may do is
# granted by paritybot's migrations (`paritybot db upgrade`), not here.
set -eu
for role in serve agent; do
    password="$(cat "/run/secrets/paritybot_db_${role}_password")"
    # psql's variables quote the name and the password: no value is pasted into SQL.
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
        -v role="paritybot_$role" -v password="$password" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'password';
SQL
done
