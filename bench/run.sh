#!/usr/bin/env bash
# Runs the benchmark harness (crates/queen_bench) against a dedicated PostgreSQL 15 cluster:
# installs the extension (release build; QUEEN_TEST_SKIP_INSTALL=1 reuses the installed
# one), builds the release broker and the bench, starts the cluster with tests/cluster.sh
# on port 5490, runs `queen-bench`, and stops the cluster again, also on failure or ctrl-c.
#   bench/run.sh [--sync-standby] [--quick] [--out DIR] [--sections 1,2,3,4]
# --sync-standby: a streaming standby of that cluster on the next port, named in
# synchronous_standby_names, so every commit waits for the standby's flush (the
# deployment teams run for durability). The report header names the standby.
set -euo pipefail
cd "$(dirname "$0")/.."
export QUEEN_TEST_PG_PORT=${QUEEN_TEST_PG_PORT:-5490}
STANDBY=0
if [ "${1:-}" = --sync-standby ]; then STANDBY=1; shift; fi
QUEEN_TEST_SKIP_INSTALL=${QUEEN_TEST_SKIP_INSTALL:-0}
if [ "$QUEEN_TEST_SKIP_INSTALL" != 1 ]; then
    # tests/cluster.sh would install a debug build; a benchmark wants the release one.
    bash scripts/install-extension.sh --release
fi
cargo build --release -p queen_broker -p queen_bench
# The peer section's Python client (bench/peer_client.py): psycopg 3 in a venv of its own,
# made once; without it the Python rows say why and the rest runs.
VENV=$PWD/target/bench-venv
if ! "$VENV/bin/python" -c 'import psycopg' 2>/dev/null; then
    { python3 -m venv "$VENV" &&
        "$VENV/bin/pip" install -q --disable-pip-version-check 'psycopg[binary]==3.3.9'; } ||
        echo "bench: could not make $VENV with psycopg; the Python rows will fail" >&2
fi
export QUEEN_BENCH_PYTHON=$VENV/bin/python
PGBIN=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --bindir)
SPORT=$((QUEEN_TEST_PG_PORT + 1))
SDATA=/tmp/qa-bench-standby-$SPORT SSOCK=/tmp/qa-bench-standby-sock-$SPORT
stop_all() {
    [ $STANDBY = 0 ] || sudo -u postgres "$PGBIN/pg_ctl" -D "$SDATA" stop -m fast >/dev/null 2>&1 || true
    bash tests/cluster.sh stop
}
trap stop_all EXIT
URL=$(QUEEN_TEST_SKIP_INSTALL=1 bash tests/cluster.sh start)
echo "bench cluster: $URL" >&2
if [ $STANDBY = 1 ]; then
    sudo -u postgres rm -rf "$SDATA"
    install -d -o postgres -g postgres "$SSOCK"
    sudo -u postgres "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$QUEEN_TEST_PG_PORT" -U postgres \
        -D "$SDATA" -R -X stream -C -S bench_standby -c fast
    sudo -u postgres sh -c "echo \"cluster_name = 'bench_standby'\" >> '$SDATA/postgresql.conf'"
    sudo -u postgres "$PGBIN/pg_ctl" -D "$SDATA" -l "$SDATA/server.log" -w \
        -o "-p $SPORT -k $SSOCK -c listen_addresses=127.0.0.1" start >/dev/null
    psql "$URL" -qAt -c "ALTER SYSTEM SET synchronous_standby_names = 'bench_standby'" -c "SELECT pg_reload_conf()" >/dev/null
    for _ in $(seq 1 50); do
        [ "$(psql "$URL" -qAt -c "SELECT sync_state FROM pg_stat_replication")" = sync ] && break
        sleep 0.2
    done
    state=$(psql "$URL" -qAt -c "SELECT application_name || ' ' || sync_state FROM pg_stat_replication")
    [ "$state" = "bench_standby sync" ] || { echo "standby not synchronous: '$state'" >&2; exit 1; }
    echo "synchronous standby: $state (port $SPORT)" >&2
fi
./target/release/queen-bench --database-url "$URL" "$@"
