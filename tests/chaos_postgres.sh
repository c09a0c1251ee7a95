#!/usr/bin/env bash
# Runs a command against a private PostgreSQL server, one that the chaos test may restart without
# disturbing anyone else's:
#
#     tests/chaos_postgres.sh COMMAND [ARGS...]
#
# initdb in a temporary directory (owned by postgres when run as root: the server refuses root), trust
# authentication, a free port on 127.0.0.1, fsync off. The command gets DATABASE_URL, CHAOS_PGDATA and
# CHAOS_PG_BIN; the server is stopped and its directory removed when the command ends.
set -euo pipefail

bin="${CHAOS_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
if [ ! -x "$bin/initdb" ]; then
    echo "chaos_postgres.sh: no PostgreSQL server binaries (looked in /usr/lib/postgresql/*/bin)" >&2
    exit 1
fi

as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

dir="$(mktemp -d /tmp/chaos-postgres.XXXXXX)"
if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
stop() {
    as_postgres "$bin/pg_ctl" -D "$dir/data" stop -m immediate >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
as_postgres "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log"
cat >>"$dir/data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/data/server.log" -w start >/dev/null
echo "== private PostgreSQL on 127.0.0.1:$port ($dir/data)"

export DATABASE_URL="postgres://postgres@127.0.0.1:$port/chaos" CHAOS_PGDATA="$dir/data" CHAOS_PG_BIN="$bin"
status=0
"$@" || status=$?
if [ "$status" != 0 ]; then
    echo "== the private PostgreSQL's log, last lines:"
    tail -n 30 "$dir/data/server.log" || true
fi
exit "$status"
