#!/usr/bin/env bash
# The main job: set up the machine, build and install the extension (release), start a
# local PostgreSQL 15 cluster owned by the unprivileged `postgres` user under
# target/qa-cluster, create database `queen` with the extension, start the broker
# (release) against it as a least-privilege role, and print how to connect.
# Idempotent: a second run reinstalls the builds, reuses the cluster and its data (the
# extension is upgraded in place, never dropped), restarts the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
PORT=${QUEEN_PG_PORT:-5499}
DATA=$ROOT/target/qa-cluster
SOCK=/tmp/qa-run-sock

bash scripts/setup.sh
bash scripts/install-extension.sh --release
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
export PGOPTIONS="-c client_min_messages=warning"
PSQL=(psql -h "$SOCK" -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -q)
"${PSQL[@]}" -d postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'queen'" | grep -q 1 ||
    "${PSQL[@]}" -d postgres -c "CREATE DATABASE queen"
# The data stays: a database created by an earlier release is upgraded in place, never
# dropped and recreated.
"${PSQL[@]}" -d queen -c "CREATE EXTENSION IF NOT EXISTS queen_ack" -c "ALTER EXTENSION queen_ack UPDATE"
echo "run: database queen at queen_ack $("${PSQL[@]}" -d queen -tAc "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'")"
# A development build may change the SQL of a version that is not released yet, which
# ALTER EXTENSION cannot see. Compare with a fresh install and say so; the data is kept.
"${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS queen_catalog_probe" -c "CREATE DATABASE queen_catalog_probe"
"${PSQL[@]}" -d queen_catalog_probe -c "CREATE EXTENSION queen_ack"
"${PSQL[@]}" -d queen -f tests/upgrade/catalog.sql >"$ROOT/target/qa-cluster.catalog"
"${PSQL[@]}" -d queen_catalog_probe -f tests/upgrade/catalog.sql >"$ROOT/target/qa-cluster.catalog.fresh"
"${PSQL[@]}" -d postgres -c "DROP DATABASE queen_catalog_probe"
if ! diff -q "$ROOT/target/qa-cluster.catalog.fresh" "$ROOT/target/qa-cluster.catalog" >/dev/null; then
    cat <<WARN
run: WARNING: database queen's queen_ack differs from a fresh install of this build (an
     unreleased development version changed its SQL after this database was created).
     Your data is kept and the database keeps its SQL. What differs (- fresh, + queen):
$(diff "$ROOT/target/qa-cluster.catalog.fresh" "$ROOT/target/qa-cluster.catalog" | grep '^[<>]' | head -20 | sed 's/^</     -/; s/^>/     +/')
     To take this build's SQL, write the step into sql/updates/ (docs/operations.md), or, DROPPING every
     queue and message: DROP EXTENSION queen_ack CASCADE; CREATE EXTENSION queen_ack;
WARN
fi

# The broker logs in as a member of queen_broker: EXECUTE on the functions, no table writes.
"${PSQL[@]}" -d queen -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queen_broker_login')
    THEN CREATE ROLE queen_broker_login LOGIN IN ROLE queen_broker; END IF; END \$\$"

[ "${QUEEN_RUN_BROKER:-1}" = 1 ] || { echo "run: PostgreSQL up on port $PORT (broker skipped)"; exit 0; }
cargo build --release -p queen_broker >/dev/null
PIDFILE=$ROOT/target/queen-broker.pid
LISTEN=${QUEEN_LISTEN:-0.0.0.0:6632}
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    # Wait for the old broker to finish its drain: it holds the spool directory's lock.
    kill "$(cat "$PIDFILE")"
    for _ in $(seq 1 75); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.2; done
fi
# The push spool (docs/availability.md): pushes the database cannot take are kept here and
# replayed; kept across reruns like the cluster's data.
QUEEN_SPOOL_DIR=${QUEEN_SPOOL_DIR:-$ROOT/target/queen-spool} \
QUEEN_DATABASE_URL=${QUEEN_DATABASE_URL:-postgres://queen_broker_login@127.0.0.1:$PORT/queen} \
QUEEN_LISTEN=$LISTEN nohup "$ROOT/target/release/queen-broker" >"$ROOT/target/queen-broker.log" 2>&1 &
echo $! >"$PIDFILE"
HEALTH=http://127.0.0.1:${LISTEN##*:}/health
for _ in $(seq 1 50); do curl -fsS "$HEALTH" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$HEALTH" >/dev/null || { echo "run: broker did not become healthy; see target/queen-broker.log"; exit 1; }

cat <<MSG
run: PostgreSQL 15 with queen_ack and the broker are up.
  broker:   http://127.0.0.1:${LISTEN##*:}   (health: $HEALTH; log: target/queen-broker.log)
  spool:    ${QUEEN_SPOOL_DIR:-$ROOT/target/queen-spool}   (pushes kept while the database is down)
  psql:     psql -h $SOCK -p $PORT -U postgres queen      (or host 127.0.0.1)
  stop:     kill \$(cat $PIDFILE); sudo -u postgres $PGBIN/pg_ctl -D $DATA stop
MSG
