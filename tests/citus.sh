#!/usr/bin/env bash
# A short-lived local Citus cluster (docs/citus.md): a coordinator and two workers on
# 127.0.0.1, owned by postgres, with queen_ack installed and distributed
# (SELECT queen.distribute()) in database queen_test and the least-privilege role
# queen_broker_test, as tests/cluster.sh does for one node.
#   tests/citus.sh start           -> prints the coordinator's connection URL (last line)
#   tests/citus.sh stop
#   tests/citus.sh createdb NAME   -> NAME on every node, Citus in it, workers added
#                                     (ready for CREATE EXTENSION queen_ack)
#   tests/citus.sh dropdb NAME
#   tests/citus.sh available       -> exit 0 when Citus is (or can be) installed
# Ports: coordinator QUEEN_CITUS_PORT (default QUEEN_TEST_PG_PORT + 4), workers the next
# two. Citus comes from the PostgreSQL of PG_CONFIG when it has citus.so; else it is
# built from ../shared/vendor (build-citus.sh, a few minutes, needs root) when that
# exists; else `start` says in one line that Citus is unavailable and exits 3, and the
# Citus suites are skipped (QUEEN_CITUS_VENDOR names another vendor folder).
# QUEEN_CITUS_SHARDS (default 8) is the shard count.
set -euo pipefail
cd "$(dirname "$0")/.."
export PGOPTIONS="-c client_min_messages=warning"
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
CPORT=${QUEEN_CITUS_PORT:-$((${QUEEN_TEST_PG_PORT:-5498} + 4))}
PORTS=("$CPORT" "$((CPORT + 1))" "$((CPORT + 2))")
SHARDS=${QUEEN_CITUS_SHARDS:-8}
VENDOR=${QUEEN_CITUS_VENDOR:-../shared/vendor}
dir_of() { echo "/tmp/qa-citus-$1"; } # data directory and unix socket of a node
as_pg() { sudo -u postgres "$@"; }
psql_node() { # port db sql...
    local port=$1 db=$2
    shift 2
    psql -X -qAt -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"
}

# Citus for this PostgreSQL: installed, or built from the vendored source.
ensure_citus() {
    [ -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ] && return 0
    if [ -x "$VENDOR/build-citus.sh" ] || [ -f "$VENDOR/build-citus.sh" ]; then
        echo "citus.sh: building Citus from $VENDOR (a few minutes)" >&2
        bash "$VENDOR/build-citus.sh" "$PG_CONFIG" >&2 && return 0
    fi
    return 1
}

create_db() { # name: on every node, with Citus, the workers added on the coordinator
    local db=$1 p
    for p in "${PORTS[@]}"; do
        psql_node "$p" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
        psql_node "$p" "$db" -c "CREATE EXTENSION citus" >/dev/null
    done
    psql_node "$CPORT" "$db" \
        -c "SELECT citus_set_coordinator_host('127.0.0.1', $CPORT)" \
        -c "SELECT citus_add_node('127.0.0.1', ${PORTS[1]})" \
        -c "SELECT citus_add_node('127.0.0.1', ${PORTS[2]})" \
        -c "CREATE EXTENSION pg_stat_statements" >/dev/null
}

drop_db() { # name, everywhere (the workers first: the coordinator's metadata names them)
    local db=$1 p
    for p in "${PORTS[2]}" "${PORTS[1]}" "$CPORT"; do
        psql_node "$p" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
    done
}

stop_all() {
    local p
    for p in "${PORTS[2]}" "${PORTS[1]}" "$CPORT"; do
        as_pg "$PGBIN/pg_ctl" -D "$(dir_of "$p")" stop -m fast >/dev/null 2>&1 || true
    done
}

start_node() { # port
    local p=$1 d
    d=$(dir_of "$p")
    as_pg "$PGBIN/pg_ctl" -D "$d" stop -m fast >/dev/null 2>&1 || true
    rm -rf "$d"
    install -d -o postgres -g postgres "$d"
    as_pg "$PGBIN/initdb" -D "$d" -U postgres -A trust >/dev/null
    # pg_test_config, with Citus first in shared_preload_libraries.
    grep -v '^#' pg_test_config | grep . | grep -v '^shared_preload_libraries' >>"$d/postgresql.conf"
    cat >>"$d/postgresql.conf" <<CONF
shared_preload_libraries = 'citus,pg_stat_statements'
max_prepared_transactions = 200
max_connections = 300
citus.shard_count = $SHARDS
CONF
    as_pg "$PGBIN/pg_ctl" -D "$d" -l "$d/server.log" -w \
        -o "-p $p -k $d -c listen_addresses=127.0.0.1" start >/dev/null
}

case "${1:-}" in
available)
    ensure_citus
    ;;
start)
    if ! ensure_citus; then
        echo "citus.sh: Citus is unavailable (no citus.so for $PG_CONFIG and no $VENDOR/build-citus.sh): the Citus suites are skipped"
        exit 3
    fi
    if [ "${QUEEN_TEST_SKIP_INSTALL:-0}" != 1 ]; then
        bash scripts/install-extension.sh
    fi
    stop_all
    for p in "${PORTS[@]}"; do start_node "$p"; done
    create_db queen_test
    psql_node "$CPORT" queen_test -c "CREATE EXTENSION queen_ack" -c "SELECT queen.distribute()" \
        -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queen_broker_test') THEN
              CREATE ROLE queen_broker_test LOGIN IN ROLE queen_broker; END IF; END \$\$" >/dev/null
    # The superuser URL of the coordinator; the broker role is queen_broker_test (trust).
    echo "postgres://postgres@127.0.0.1:$CPORT/queen_test"
    ;;
stop)
    stop_all
    ;;
createdb)
    create_db "${2:?usage: $0 createdb NAME}"
    ;;
dropdb)
    drop_db "${2:?usage: $0 dropdb NAME}"
    ;;
*)
    echo "usage: $0 start|stop|createdb NAME|dropdb NAME|available" >&2
    exit 2
    ;;
esac
