#!/bin/sh
# First start: initdb with the superuser and password from the environment, password
# authentication from other hosts, and POSTGRES_DB created. Then PostgreSQL as PID 1.
set -eu
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
as_postgres="setpriv --reuid=postgres --regid=postgres --init-groups"
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    chown postgres "$pwfile"
    $as_postgres initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        echo "CREATE DATABASE \"$db\"" | $as_postgres postgres --single -D "$PGDATA" postgres >/dev/null
    fi
fi
# Like the official image: a command that starts with "postgres" passes its options on.
if [ "${1:-}" = postgres ]; then
    shift
fi
exec $as_postgres postgres -D "$PGDATA" -c listen_addresses='*' "$@"
