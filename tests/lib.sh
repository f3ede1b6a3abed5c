# Sourced by the shell suites after they set SUITE: the cargo-style lines every suite
# prints (`test SUITE::NAME ... ok` / `... FAILED: why`), counted for their closing
# `test result:` line, which scripts/test.sh adds up.
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "test $SUITE::$1 ... ok"; }
fail() { failed=$((failed + 1)); echo "test $SUITE::$1 ... FAILED${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "expected [$3] got [$2]"; fi; }
# A setup step that fails counts as one failed test, so the result line is always printed.
setup_failed() { # name, message
    echo "test $SUITE::$1 ... FAILED"
    echo "$2" >&2
    echo "test result: FAILED. 0 passed; 1 failed"
    exit 1
}
# A debug queen-broker for the suites that drive one over HTTP: built, started on a free
# loopback port against DB-URL with the extra environment given, /health waited for (a
# broker that never becomes healthy fails the suite's setup, with its log). Sets
# BROKER_PID, BROKER_PORT and BROKER_BASE; broker_stop (from the suite's cleanup) ends it.
BROKER_PID=
broker_start() { # db-url log-file [VAR=VALUE...]
    local db=$1 log=$2
    shift 2
    cargo build -q -p queen_broker >&2 || setup_failed broker_build "cargo build -p queen_broker failed"
    BROKER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    BROKER_BASE=http://127.0.0.1:$BROKER_PORT
    env QUEEN_DATABASE_URL="$db" QUEEN_LISTEN="127.0.0.1:$BROKER_PORT" RUST_LOG="${RUST_LOG:-warn}" "$@" \
        "${CARGO_TARGET_DIR:-target}/debug/queen-broker" >"$log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 100); do
        curl -fsS "$BROKER_BASE/health" >/dev/null 2>&1 && return 0
        kill -0 "$BROKER_PID" 2>/dev/null || break
        sleep 0.1
    done
    setup_failed broker_start "queen-broker did not become healthy at $BROKER_BASE (database $db):
$(tail -20 "$log")"
}
broker_stop() { # TERM, up to 5 s, then KILL
    [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null || return 0
    kill -TERM "$BROKER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=
}
