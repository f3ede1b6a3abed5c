#!/usr/bin/env bash
# CALL queen.run_maintenance() where it needs more than one session or a clock: two
# runners at once (one holding the lock, then two real runs over much due work), and
# pg_cron running it by itself. What one session shows (a run's report, retention, the
# sidecar purge, orphans, the time budget, bad arguments) is the regression file
# tests/pg_regress/sql/maintenance.sql (tests/regress.sh).
#   tests/maintenance.sh <postgres-url>     (a superuser URL of tests/cluster.sh's cluster)
# The pg_cron part runs on a second short-lived cluster that preloads pg_cron (Debian's
# postgresql-15-cron, installed by scripts/setup.sh): the documented schedule
#   SELECT cron.schedule('queen-maintenance', '* * * * *', 'CALL queen.run_maintenance()')
# runs it by itself: the test waits for pg_cron's next minute and observes the effect.
# QUEEN_SKIP_CRON=1 skips that part (it waits up to a minute). Prints cargo-style lines.
# QUEEN_TEST_CITUS=1: the same on a Citus cluster (tests/testdb.sh), distributed; the
# pg_cron part (a one-node cluster of its own) is then skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/maintenance.sh <postgres-url> [--cron-only]}
# --cron-only: only the pg_cron part (scripts/test.sh runs it beside other suites: it
# spends its time waiting for pg_cron's next minute, on a cluster of its own).
CRON_ONLY=$([ "${2:-}" = --cron-only ] && echo 1 || echo 0)
export PGOPTIONS="-c client_min_messages=warning"
DB=${URL%/*}/queen_maint
passed=0 failed=0
SUITE=maintenance
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sql() { psql "$1" -X -qAt -v ON_ERROR_STOP=1 -c "$2" 2>&1; }
report() { sql "$1" "CALL queen.run_maintenance(${2:-10000}, ${3:-1000})"; }
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2]))' "$1" "$2"; }
. "$(dirname "$0")/testdb.sh"
fresh_db() { # url-of-db name
    testdb_create "$URL" "$2"
    sql "$1" "$(testdb_install_sql)" >/dev/null
}
age() { # db queue seconds (in UTC arithmetic: Citus refuses a STABLE timestamptz - interval on a column)
    for t in log_segments log_txns; do
        sql "$1" "UPDATE queen.$t x SET created_at = ((x.created_at AT TIME ZONE 'UTC') - make_interval(secs => $3)) AT TIME ZONE 'UTC'
                    FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                   WHERE p.id = x.partition_id AND q.name = '$2'" >/dev/null
    done
}

if [ "$CRON_ONLY" = 0 ]; then
    fresh_db "$DB" queen_maint

    # Two runners: while one holds the lock (a run in progress), the other returns at once.
    psql "$DB" -X -qAt -c "BEGIN" -c "SELECT pg_advisory_xact_lock(1903519086, 1)" -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null &
    holder=$!
    sleep 1
    t0=$(date +%s%N)
    r=$(report "$DB")
    t1=$(date +%s%N)
    check second_runner_skips_while_another_works "$(field "$r" ran)" "False"
    [ $(((t1 - t0) / 1000000)) -lt 2000 ] && ok second_runner_returns_at_once || fail second_runner_returns_at_once "took $(((t1 - t0) / 1000000)) ms"
    wait $holder
    # And two real runs at once over much due work: exactly one of them works.
    for i in $(seq 1 200); do echo "SELECT queen.push('many$i', '[1]');"; done | psql "$DB" -X -q >/dev/null
    for i in $(seq 1 200); do age "$DB" "many$i" 5000; done 2>/dev/null
    # A budget of 10 minutes: on Citus under load (a 2PC commit per step) 200 steps can take
    # over 10 s (seen: 127 of 200 done), and a run stopped by its budget leaves work: not what
    # this checks.
    (report "$DB" 600000 1 >/tmp/qa-maint-a.$$) & a=$!
    (report "$DB" 600000 1 >/tmp/qa-maint-b.$$) & b=$!
    wait $a $b
    ra=$(field "$(cat /tmp/qa-maint-a.$$)" ran) rb=$(field "$(cat /tmp/qa-maint-b.$$)" ran)
    pa=$(field "$(cat /tmp/qa-maint-a.$$)" sidecarRows) pb=$(field "$(cat /tmp/qa-maint-b.$$)" sidecarRows)
    rm -f /tmp/qa-maint-a.$$ /tmp/qa-maint-b.$$
    # Whichever way they interleave (the second may find the lock taken, or everything done),
    # each due step runs exactly once: the two reports add up to the work there was.
    check concurrent_runs_do_every_step_exactly_once \
        "$([ "$ra" = True ] || [ "$rb" = True ] && echo worked)|$(( ${pa/None/0} + ${pb/None/0} ))" "worked|200"
    check concurrent_runs_purged_every_due_partition "$(sql "$DB" "SELECT count(*) FROM queen.maintenance_plan_v1()")" "0"

    testdb_drop "$URL" queen_maint
fi

# pg_cron runs it by itself (Debian's pg_cron 1.4: minute granularity).
if [ "${QUEEN_SKIP_CRON:-0}" = 1 ] || [ -n "${QUEEN_TEST_CITUS:-}" ]; then
    echo "maintenance: pg_cron part skipped (QUEEN_SKIP_CRON=1 or a Citus run)"
elif [ ! -e "$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --pkglibdir)/pg_cron.so" ]; then
    fail pg_cron_schedule_runs_maintenance "pg_cron is not installed (scripts/setup.sh installs postgresql-15-cron)"
else
    CRON_PORT=$((${QUEEN_TEST_PG_PORT:-5498} + 100))
    CURL=$(QUEEN_TEST_PG_PORT=$CRON_PORT QUEEN_TEST_SKIP_INSTALL=1 QUEEN_TEST_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements,pg_cron'
cron.database_name = 'queen_test'
cron.use_background_workers = on
max_worker_processes = 16" bash tests/cluster.sh start 2>/dev/null)
    if [ -z "$CURL" ]; then
        fail pg_cron_schedule_runs_maintenance "the pg_cron cluster did not start"
    else
        sql "$CURL" "CREATE EXTENSION pg_cron" >/dev/null
        sql "$CURL" "SELECT queen.configure_queue_v1('cron', NULL, NULL, '{\"retentionSeconds\": 60}')" >/dev/null
        sql "$CURL" "SELECT queen.push('cron', '[1,2]'), queen.push('cron', '[3]')" >/dev/null
        age "$CURL" cron 1000
        sql "$CURL" "SELECT cron.schedule('queen-maintenance', '* * * * *', 'CALL queen.run_maintenance()')" >/dev/null
        left=""
        for _ in $(seq 1 75); do
            left=$(sql "$CURL" "SELECT count(*) FROM queen.log_segments")
            [ "$left" = 0 ] && break
            sleep 1
        done
        check pg_cron_schedule_runs_maintenance "$left" "0"
        check pg_cron_job_succeeded "$(sql "$CURL" "SELECT status FROM cron.job_run_details ORDER BY start_time DESC LIMIT 1")" "succeeded"
        QUEEN_TEST_PG_PORT=$CRON_PORT bash tests/cluster.sh stop
    fi
fi
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
