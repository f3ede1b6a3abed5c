#!/usr/bin/env bash
# The failover drill (docs/availability.md, "Failover"): a primary and a streaming
# synchronous standby (pg_basebackup -R, named in synchronous_standby_names), two brokers
# on a multi-host URL (target_session_attrs=read-write), producers and consumers running;
# the primary is killed (pg_ctl -m immediate) and the standby promoted (pg_ctl promote).
# The assertions are tests/reliability/failover.py's. Own short-lived clusters; prints
# cargo-style lines. The long form (RELIABILITY_LONG=1) runs the load longer first.
#   tests/failover.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PGOPTIONS="-c client_min_messages=warning"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
PORT=$((${QUEEN_TEST_PG_PORT:-5498} + 300))
SPORT=$((PORT + 1))
SDATA=/tmp/qa-failover-standby-$SPORT
SSOCK=/tmp/qa-failover-standby-sock-$SPORT
as_pg() { sudo -u postgres "$@"; }
admin="postgres://postgres@127.0.0.1:$PORT/queen_test"
fail() { echo "test failover::$1 ... FAILED${2:+: $2}"; echo "test result: FAILED. 0 passed; 1 failed"; exit 1; }
cleanup() {
    as_pg "$PGBIN/pg_ctl" -D "$SDATA" stop -m immediate >/dev/null 2>&1
    QUEEN_TEST_PG_PORT=$PORT bash tests/cluster.sh stop
    as_pg rm -rf "$SDATA" "$SSOCK"
}
trap cleanup EXIT

QUEEN_TEST_PG_PORT=$PORT QUEEN_TEST_SKIP_INSTALL=1 bash tests/cluster.sh start >/dev/null 2>&1 ||
    fail primary_starts
as_pg rm -rf "$SDATA"
install -d -o postgres -g postgres "$SSOCK"
as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p $PORT -U postgres -D "$SDATA" -R -X stream \
    -C -S failover_standby -c fast >/dev/null 2>&1 || fail standby_basebackup
as_pg sh -c "echo \"cluster_name = 'failover_standby'\" >> '$SDATA/postgresql.conf'"
as_pg "$PGBIN/pg_ctl" -D "$SDATA" -l "$SDATA/server.log" -w \
    -o "-p $SPORT -k $SSOCK -c listen_addresses=127.0.0.1" start >/dev/null || fail standby_starts
psql "$admin" -X -qAt -c "ALTER SYSTEM SET synchronous_standby_names = 'failover_standby'" \
    -c "SELECT pg_reload_conf()" >/dev/null
for _ in $(seq 1 50); do
    [ "$(psql "$admin" -X -qAt -c "SELECT sync_state FROM pg_stat_replication")" = sync ] && break
    sleep 0.2
done
[ "$(psql "$admin" -X -qAt -c "SELECT sync_state FROM pg_stat_replication")" = sync ] ||
    fail standby_is_synchronous
cargo build -q -p queen_broker || fail build_broker
rc=0
QUEEN_DATABASE_URL="postgres://queen_broker_test@127.0.0.1:$PORT,127.0.0.1:$SPORT/queen_test?target_session_attrs=read-write" \
FAILOVER_PRIMARY_DATA=/tmp/qa-test-cluster-$PORT FAILOVER_STANDBY_DATA=$SDATA \
    timeout -k 10 300 python3 tests/reliability/failover.py 2>&1 | sed 's/^/    /'
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then
    echo "test failover::failover_drill ... ok"
    echo "test result: ok. 1 passed; 0 failed"
else
    echo "test failover::failover_drill ... FAILED"
    echo "test result: FAILED. 0 passed; 1 failed"
    exit 1
fi
