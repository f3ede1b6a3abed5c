#!/usr/bin/env bash
# Reliability suite (tests/reliability/README.md): soak with faults, crash durability, hostile HTTP input,
# and (long form) ten minutes of steady load under retention whose tables must plateau
# (plateau.py) and cargo-fuzz over the codec.
#
#   tests/reliability.sh <postgres-url> [--long] [--pgdata DIR] [--pgsock DIR]
#                        [--extra-pgdata DIR:DIR] [--only NAME,NAME]
#
# The URL must point at a cluster laid out by tests/cluster.sh: data dir
# /tmp/qa-test-cluster-$PORT (or $QUEEN_TEST_CLUSTER_DIR), socket dir /tmp/qa-test-sock-$PORT,
# run as the postgres user from /usr/lib/postgresql/15/bin. The PostgreSQL crash test
# stops that cluster with `pg_ctl stop -m immediate` and starts it again, so it needs the
# data dir: it is derived from the URL's port unless --pgdata (or RELIABILITY_PG_DATA /
# QUEEN_TEST_CLUSTER_DIR) says otherwise. Example:
#   url=$(QUEEN_TEST_PG_PORT=5485 QUEEN_TEST_SKIP_INSTALL=1 tests/cluster.sh start)
#   tests/reliability.sh "$url"            # short form, about 2 minutes
#   tests/reliability.sh "$url" --long     # or RELIABILITY_LONG=1
# --only (or RELIABILITY_ONLY) runs the named tests only (e.g. soak_with_faults on a Citus
# coordinator); --extra-pgdata (or RELIABILITY_PG_EXTRA_DATA) names more data dirs whose
# server.log is scanned for deadlocks and crashed backends (a Citus cluster's workers).
# Other knobs: RELIABILITY_SEED (default 6), RELIABILITY_FUZZ_INPUTS, RELIABILITY_FUZZ_SECONDS
# (per cargo-fuzz target in the long form, default 60).
# Needs: python3 (stdlib only), psql, sudo (to act as the postgres user), cargo.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ $# -lt 1 ] || [[ "$1" != postgres* ]]; then
    echo "usage: $0 <postgres-url> [--long] [--pgdata DIR] [--pgsock DIR] [--extra-pgdata DIRS] [--only NAMES]" >&2
    exit 2
fi
URL=$1
shift
LONG=${RELIABILITY_LONG:-0}
PGDATA_DIR=${RELIABILITY_PG_DATA:-${QUEEN_TEST_CLUSTER_DIR:-}}
PGSOCK_DIR=${RELIABILITY_PG_SOCK:-}
EXTRA_PGDATA=${RELIABILITY_PG_EXTRA_DATA:-}
ONLY=${RELIABILITY_ONLY:-}
while [ $# -gt 0 ]; do
    case "$1" in
    --long) LONG=1 ;;
    --pgdata) PGDATA_DIR=$2; shift ;;
    --pgsock) PGSOCK_DIR=$2; shift ;;
    --extra-pgdata) EXTRA_PGDATA=$2; shift ;;
    --only) ONLY=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
PORT=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port or 5432)' "$URL")
PGDATA_DIR=${PGDATA_DIR:-/tmp/qa-test-cluster-$PORT}
PGSOCK_DIR=${PGSOCK_DIR:-/tmp/qa-test-sock-$PORT}
WORK=$(mktemp -d /tmp/queen-reliability.XXXXXX)

export QUEEN_DATABASE_URL=$URL RELIABILITY_LONG=$LONG RELIABILITY_PG_DATA=$PGDATA_DIR \
    RELIABILITY_PG_SOCK=$PGSOCK_DIR RELIABILITY_PG_EXTRA_DATA=$EXTRA_PGDATA RELIABILITY_WORKDIR=$WORK \
    QUEEN_BROKER_BIN=$ROOT/target/debug/queen-broker PYTHONUNBUFFERED=1

passed=0
failed=0
names=()
result() { # name rc
    if [ "$2" = 0 ]; then
        echo "test reliability::$1 ... ok"
        passed=$((passed + 1))
    else
        echo "test reliability::$1 ... FAILED"
        failed=$((failed + 1))
        names+=("$1")
    fi
}

t0=$(date +%s)
echo "reliability: url=$URL pgdata=$PGDATA_DIR long=$LONG seed=${RELIABILITY_SEED:-6} logs=$WORK${ONLY:+ only=$ONLY}"
selected() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# The tree may be mid-edit by someone else: retry the build a few times (bounded).
built=1
for attempt in 1 2 3 4 5; do
    if cargo build -q -p queen_broker >"$WORK/build.log" 2>&1; then
        built=0
        break
    fi
    echo "broker build failed (attempt $attempt); retrying in 20s"
    tail -5 "$WORK/build.log" | sed 's/^/    /'
    [ "$attempt" = 5 ] || sleep 20
done
if [ $built != 0 ]; then
    result build_broker 1
    echo "test result: FAILED. $passed passed; $failed failed"
    exit 1
fi

if [ "$LONG" = 1 ]; then t_soak=1200; t_crash=600; t_hostile=1200; else t_soak=180; t_crash=120; t_hostile=120; fi
# The library of the version being built (a library per version).
LIB=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --pkglibdir)/queen_ack-$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1).so
lib_stamp() { stat -c '%Y.%s' "$LIB" 2>/dev/null || echo missing; }
run_py() { # name timeout script args...
    local name=$1 secs=$2 rc attempt before
    shift 2
    selected "$name" || return 0
    for attempt in 1 2; do
        # Other sessions on this machine may replace the extension library (cargo pgrx
        # install/test): wait (bounded) until it loads before starting a test.
        python3 "$ROOT/tests/reliability/common.py" wait-extension 2>&1 | sed 's/^/    /'
        before=$(lib_stamp)
        timeout -k 10 "$secs" python3 "$ROOT/tests/reliability/$1" "${@:2}" 2>&1 | sed 's/^/    /'
        rc=${PIPESTATUS[0]}
        [ "$rc" = 124 ] && echo "    $name: timed out after ${secs}s"
        # Retry once only when the failure coincides with the library being replaced
        # underneath the cluster (an environment event, not a finding).
        if [ "$rc" != 0 ] && [ "$attempt" = 1 ] && [ "$before" != "$(lib_stamp)" ]; then
            echo "    $name: the extension library changed during the run ($before -> $(lib_stamp)); rerunning once"
            continue
        fi
        break
    done
    result "$name" "$rc"
}

run_py soak_with_faults $t_soak soak.py
run_py crash_broker_kill9 $t_crash crash.py broker_kill9
# A test that stops or restarts the cluster needs its data dir.
run_with_pgdata() { # name timeout script args...
    selected "$1" || return 0
    if [ -d "$PGDATA_DIR" ] || sudo test -d "$PGDATA_DIR"; then
        run_py "$@"
    else
        echo "    $1: data dir $PGDATA_DIR not found (give --pgdata DIR)"
        result "$1" 1
    fi
}
run_with_pgdata crash_pg_immediate $t_crash crash.py pg_immediate
run_with_pgdata streams_crash $t_crash streams.py
run_py outage_spool_kill9 $t_crash outage.py spool_kill9
run_with_pgdata outage_db_stop $t_crash outage.py db_stop
run_py hostile_input $t_hostile hostile.py
if [ "$LONG" = 1 ]; then
    # Ten minutes of steady load with retention 60 s: the tables must plateau.
    run_py plateau_long 900 plateau.py run --seconds 600 --retention 60 --check
fi

if [ "$LONG" = 1 ] && [ -z "$ONLY" ]; then
    secs=${RELIABILITY_FUZZ_SECONDS:-60}
    if command -v cargo-fuzz >/dev/null 2>&1; then
        for target in frame_decode segment_decode hash_parse; do
            (cd fuzz && RUSTC_BOOTSTRAP=1 timeout -k 10 $((secs + 900)) \
                cargo fuzz run "$target" -- -max_total_time="$secs" >"$WORK/fuzz-$target.log" 2>&1)
            rc=$?
            grep -E '^Done|SUMMARY|panicked' "$WORK/fuzz-$target.log" | tail -3 | sed 's/^/    /'
            [ $rc = 0 ] || tail -30 "$WORK/fuzz-$target.log" | sed 's/^/    /'
            result "cargo_fuzz_$target" $rc
        done
    else
        echo "    cargo-fuzz not installed (cargo install cargo-fuzz); running only the fallback loop"
    fi
    timeout -k 10 900 cargo run -q --release --manifest-path fuzz/fallback/Cargo.toml -- 2000000 \
        "${RELIABILITY_SEED:-6}" 2>&1 | sed 's/^/    /'
    result fuzz_fallback_loop "${PIPESTATUS[0]}"
fi

[ $((passed + failed)) -gt 0 ] || result "only_names_a_test($ONLY)" 1
echo "reliability: runtime $(($(date +%s) - t0))s; broker and test logs in $WORK"
if [ $failed = 0 ]; then
    echo "test result: ok. $passed passed; $failed failed"
    exit 0
fi
echo "failures: ${names[*]}"
echo "test result: FAILED. $passed passed; $failed failed"
exit 1
