#!/bin/sh
# The first start makes the cluster in $PGDATA (a volume): POSTGRES_USER as its superuser with
# POSTGRES_PASSWORD (scram-sha-256 over TCP, trust on the container's own socket) and POSTGRES_DB;
# every start then runs the server in the foreground as the postgres user.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
as_postgres() { runuser -u postgres -- "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pw="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"
    chown postgres "$pw"
    as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pw"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    if [ "$POSTGRES_DB" != "postgres" ]; then
        as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
        as_postgres createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
        as_postgres pg_ctl -D "$PGDATA" -m fast -w stop
    fi
fi
# setpriv execs postgres as PID 1, which gets SIGINT (STOPSIGNAL: fast shutdown) itself; runuser
# stayed the parent and ignores SIGINT, so every stop waited out the 30 s grace (seen here).
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA"
