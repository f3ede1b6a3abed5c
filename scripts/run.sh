#!/usr/bin/env bash
# The main job: set up the machine, build and install the extension (release), start a
# local PostgreSQL 15 cluster owned by the unprivileged `postgres` user under
# target/qa-cluster, create database `queen` with the extension, start the broker
# (release) against it as a least-privilege role, and print how to connect.
# Idempotent: a second run reinstalls the builds, reuses the cluster, restarts the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PGBIN=/usr/lib/postgresql/15/bin
PORT=${QUEEN_PG_PORT:-5499}
DATA=$ROOT/target/qa-cluster
SOCK=/tmp/qa-run-sock

bash scripts/setup.sh
# pgrx copies over the installed library in place; unlinking it first gives the new
# build a new inode, so backends still running the old one are not disturbed.
rm -f "$("$PGBIN/pg_config" --pkglibdir)/queen_ack.so"
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
# One version (0.1.0) so far, so ALTER EXTENSION UPDATE cannot carry a changed build:
# when the installed script differs from the one this database was created from, the
# dev database's extension is recreated (its queue data is dropped; said out loud).
SQL_MD5=$(md5sum "$("$PGBIN/pg_config" --sharedir)/extension/queen_ack--0.1.0.sql" | cut -d' ' -f1)
STAMP=$ROOT/target/qa-cluster.ext-md5
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" != "$SQL_MD5" ]; then
    echo "run: extension build changed: recreating queen_ack in database queen (dev data dropped)"
    "${PSQL[@]}" -d queen -c "DROP EXTENSION IF EXISTS queen_ack CASCADE" -c "DROP SCHEMA IF EXISTS queen CASCADE"
fi
"${PSQL[@]}" -d queen -c "CREATE EXTENSION IF NOT EXISTS queen_ack"
echo "$SQL_MD5" >"$STAMP"

# The broker logs in as a member of queen_broker: EXECUTE on the functions, no table writes.
"${PSQL[@]}" -d queen -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queen_broker_login')
    THEN CREATE ROLE queen_broker_login LOGIN IN ROLE queen_broker; END IF; END \$\$"

[ "${QUEEN_RUN_BROKER:-1}" = 1 ] || { echo "run: PostgreSQL up on port $PORT (broker skipped)"; exit 0; }
cargo build --release -p queen_broker >/dev/null
PIDFILE=$ROOT/target/queen-broker.pid
LISTEN=${QUEEN_LISTEN:-0.0.0.0:6632}
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill "$(cat "$PIDFILE")"; sleep 1
fi
QUEEN_DATABASE_URL=${QUEEN_DATABASE_URL:-postgres://queen_broker_login@127.0.0.1:$PORT/queen} \
QUEEN_LISTEN=$LISTEN nohup "$ROOT/target/release/queen-broker" >"$ROOT/target/queen-broker.log" 2>&1 &
echo $! >"$PIDFILE"
HEALTH=http://127.0.0.1:${LISTEN##*:}/health
for _ in $(seq 1 50); do curl -fsS "$HEALTH" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$HEALTH" >/dev/null || { echo "run: broker did not become healthy; see target/queen-broker.log"; exit 1; }

cat <<MSG
run: PostgreSQL 15 with queen_ack and the broker are up.
  broker:   http://127.0.0.1:${LISTEN##*:}   (health: $HEALTH; log: target/queen-broker.log)
  psql:     psql -h $SOCK -p $PORT -U postgres queen      (or host 127.0.0.1)
  stop:     kill \$(cat $PIDFILE); sudo -u postgres $PGBIN/pg_ctl -D $DATA stop
MSG
