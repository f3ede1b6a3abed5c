#!/usr/bin/env bash
# A short-lived PostgreSQL test cluster with the (non-test) extension installed, for
# the suites that need a running server: the SQL regression files, the upgrade test and
# the broker tests. PostgreSQL 15 by default; PG_CONFIG names another (scripts/pg.sh N).
#   tests/cluster.sh start   -> prints the connection URL
#   tests/cluster.sh stop
# Runs as the unprivileged postgres user (PostgreSQL refuses root) with pg_test_config
# (plus QUEEN_TEST_EXTRA_CONF, settings for this cluster only).
set -euo pipefail
cd "$(dirname "$0")/.."
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
PORT=${QUEEN_TEST_PG_PORT:-5498}
# Several clusters can run side by side: give each its own port (dir and socket follow).
DATA=${QUEEN_TEST_CLUSTER_DIR:-/tmp/qa-test-cluster-$PORT}
SOCK=/tmp/qa-test-sock-$PORT
as_pg() { sudo -u postgres "$@"; }

case "${1:-}" in
start)
    # `cargo pgrx test` leaves its test build installed: put the real one back, with
    # the frozen scripts of earlier releases (QUEEN_TEST_SKIP_INSTALL=1 reuses what is
    # installed).
    if [ "${QUEEN_TEST_SKIP_INSTALL:-0}" != 1 ]; then
        bash scripts/install-extension.sh
    fi
    as_pg "$PGBIN/pg_ctl" -D "$DATA" stop -m fast >/dev/null 2>&1 || true
    rm -rf "$DATA" "$SOCK"
    install -d -o postgres -g postgres "$DATA" "$SOCK"
    as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust >/dev/null
    grep -v '^#' pg_test_config | grep . >>"$DATA/postgresql.conf"
    # Extra settings for one cluster (e.g. preloading pg_cron), one per line.
    [ -z "${QUEEN_TEST_EXTRA_CONF:-}" ] || printf '%s\n' "$QUEEN_TEST_EXTRA_CONF" >>"$DATA/postgresql.conf"
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
        -o "-p $PORT -k $SOCK -c listen_addresses=127.0.0.1" start >/dev/null
    psql -h "$SOCK" -p "$PORT" -U postgres -qAt -v ON_ERROR_STOP=1 -d postgres \
        -c "CREATE DATABASE queen_test" >/dev/null
    psql -h "$SOCK" -p "$PORT" -U postgres -qAt -v ON_ERROR_STOP=1 -d queen_test \
        -c "CREATE EXTENSION queen_ack; CREATE EXTENSION pg_stat_statements" \
        -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queen_broker_test') THEN
              CREATE ROLE queen_broker_test LOGIN IN ROLE queen_broker; END IF; END \$\$" >/dev/null
    # The superuser URL; the least-privilege broker role is queen_broker_test (trust auth).
    echo "postgres://postgres@127.0.0.1:$PORT/queen_test"
    ;;
stop)
    as_pg "$PGBIN/pg_ctl" -D "$DATA" stop -m fast >/dev/null 2>&1 || true
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
