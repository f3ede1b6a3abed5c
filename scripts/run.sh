#!/usr/bin/env bash
# The main job: set up the machine, build and install the extension (release), start a
# local PostgreSQL 15 cluster owned by the unprivileged `postgres` user under
# target/qa-cluster, create database `queen` with the extension, and print how to connect.
# Idempotent: a second run reinstalls the build and reuses the running cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PGBIN=/usr/lib/postgresql/15/bin
PORT=${QUEEN_PG_PORT:-5499}
DATA=$ROOT/target/qa-cluster
SOCK=/tmp/qa-run-sock

bash scripts/setup.sh
cargo pgrx install --release --pg-config "$PGBIN/pg_config" >/dev/null
echo "run: extension installed"

as_pg() { sudo -u postgres "$@"; }
install -d -o postgres -g postgres "$SOCK"
if [ ! -f "$DATA/PG_VERSION" ]; then
    install -d -o postgres -g postgres "$DATA"
    as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust >/dev/null
    grep -v '^#' pg_test_config | grep . >> "$DATA/postgresql.conf"
fi
if ! as_pg "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
        -o "-p $PORT -k $SOCK -c listen_addresses=127.0.0.1" start >/dev/null
fi
PSQL=(psql -h "$SOCK" -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -q)
"${PSQL[@]}" -d postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'queen'" | grep -q 1 ||
    "${PSQL[@]}" -d postgres -c "CREATE DATABASE queen"
"${PSQL[@]}" -d queen -c "CREATE EXTENSION IF NOT EXISTS queen_ack; ALTER EXTENSION queen_ack UPDATE" 2>/dev/null ||
    "${PSQL[@]}" -d queen -c "CREATE EXTENSION IF NOT EXISTS queen_ack"

cat <<MSG
run: PostgreSQL 15 with queen_ack is up.
  connect:  psql -h $SOCK -p $PORT -U postgres queen      (or host 127.0.0.1)
  stop:     sudo -u postgres $PGBIN/pg_ctl -D $DATA stop
MSG
