#!/usr/bin/env bash
# Queen's own JavaScript client suites, unchanged, against the broker (acceptance):
#   tests/queen_js.sh postgres://postgres@127.0.0.1:5498/queen_test [human|stream]...
# The client is a vendored copy of Queen's `clients/client-js` (tests/queen-js; origin,
# the one substitution made to it, and the tests known to differ with why:
# tests/queen-js/KNOWN_DIFFERENCES.md). Copies it to target/queen-js, installs its
# locked dependencies there with `npm ci` (only when package-lock.json changed; never
# into the source tree), builds queen-broker (debug), starts it on a free loopback port
# against that database, and runs `node test-v2/run.js human` (the client suite) and
# `node test-v2/run.js stream` (the streams suite), both by default. Each Queen test is
# one result line; a failure of a test listed in KNOWN_DIFFERENCES.md is "ignored", any
# other failure fails. Without node and npm it prints one skip line.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/queen_js.sh <postgres-url> [human|stream]...}
shift
SUITES=("$@")
((${#SUITES[@]})) || SUITES=(human stream)
TARGET=${CARGO_TARGET_DIR:-target}
SRC=tests/queen-js
RUN=$TARGET/queen-js
KNOWN=$SRC/KNOWN_DIFFERENCES.md
WORK=$(mktemp -d /tmp/queen-js.XXXXXX)
BROKER_PID=

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "=== queen_js skipped: node and npm are not installed (apt-get install nodejs npm)"
    exit 0
fi

cleanup() {
    if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill -TERM "$BROKER_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

setup_failed() { # name, message
    echo "test queen_js::$1 ... FAILED"
    echo "$2" >&2
    echo "test result: FAILED. 0 passed; 1 failed"
    exit 1
}

# 1. The client: sources copied fresh (node_modules kept), dependencies from the lock file.
mkdir -p "$RUN"
rm -rf "$RUN/client-v2" "$RUN/test-v2"
cp -r "$SRC/client-v2" "$SRC/test-v2" "$SRC/package.json" "$SRC/package-lock.json" "$RUN/" ||
    setup_failed copy "copying $SRC to $RUN failed"
# The one substitution (KNOWN_DIFFERENCES.md): run.js names its broker as a literal
# http://localhost:6632; it takes QUEEN_URL, which the stream tests already read.
sed -i "s|baseUrls: \['http://localhost:6632'\]|baseUrls: [process.env.QUEEN_URL]|" "$RUN/test-v2/run.js"
grep -q "baseUrls: \[process.env.QUEEN_URL\]" "$RUN/test-v2/run.js" ||
    setup_failed patch "test-v2/run.js no longer has the line the broker URL is substituted in"
stamp=$RUN/node_modules/.queen-js-lock
want=$(sha256sum "$SRC/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    (cd "$RUN" && npm ci --no-audit --no-fund --loglevel=error >"$WORK/npm.log" 2>&1) ||
        setup_failed npm "npm ci in $RUN failed: $(tail -20 "$WORK/npm.log")"
    echo "$want" >"$stamp"
fi

# 2. The broker.
cargo build -q -p queen_broker >&2 || setup_failed broker_build "cargo build -p queen_broker failed"
BIN=$TARGET/debug/queen-broker
PORT=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })')
QUEEN_DATABASE_URL=$URL QUEEN_LISTEN=127.0.0.1:$PORT RUST_LOG=${RUST_LOG:-warn} \
    "$BIN" >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 "$BROKER_PID" 2>/dev/null || break
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 ||
    setup_failed broker_start "queen-broker did not become healthy on port $PORT (database $URL):
$(tail -20 "$WORK/broker.log")"

# 3. The suites. run.js opens a pg pool of its own (PG_HOST, PG_PORT, PG_DB, PG_USER,
# PG_PASSWORD) for cleanup and for the tests that read Queen's own tables: it gets the
# cluster's `postgres` database, so Queen's raw SQL never touches the broker's database.
hostport=${URL#*@}
hostport=${hostport%%/*}
pg_user=${URL#*://}
pg_user=${pg_user%%@*}
pg_user=${pg_user%%:*}
known=$(grep -oE '^- `[a-z]+::[A-Za-z0-9_]+`' "$KNOWN" | tr -d '`' | cut -c3-)
passed=0 failed=0 ignored=0
for suite in "${SUITES[@]}"; do
    (cd "$RUN" && QUEEN_URL=http://127.0.0.1:$PORT PG_HOST=${hostport%%:*} PG_PORT=${hostport##*:} \
        PG_DB=postgres PG_USER=$pg_user PG_PASSWORD=unused \
        timeout "${QUEEN_JS_TIMEOUT:-900}" node test-v2/run.js "$suite") >"$WORK/$suite.out" 2>&1
    rc=$?
    # run.js prints "✅|❌ name: message" per test after the "Results:" line.
    results=$(sed -n '/^Results:$/,/^====/p' "$WORK/$suite.out" | grep -E '^(✅|❌) ')
    if [ -z "$results" ]; then
        echo "test queen_js::$suite::harness ... FAILED"
        echo "node test-v2/run.js $suite exited with status $rc and printed no results:" >&2
        tail -30 "$WORK/$suite.out" >&2
        failed=$((failed + 1))
        continue
    fi
    while IFS= read -r line; do
        name=${line#* }
        name=${name%%:*}
        if [[ $line == ✅* ]]; then
            echo "test queen_js::$suite::$name ... ok"
            passed=$((passed + 1))
            grep -qx "$suite::$name" <<<"$known" &&
                echo "note: $suite::$name passes; remove it from $KNOWN" >&2
        elif grep -qx "$suite::$name" <<<"$known"; then
            echo "test queen_js::$suite::$name ... ignored (known difference: $KNOWN)"
            ignored=$((ignored + 1))
        else
            echo "test queen_js::$suite::$name ... FAILED"
            echo "  ${line#* }" >&2
            failed=$((failed + 1))
        fi
    done <<<"$results"
done
if [ "$failed" -ne 0 ]; then
    echo "--- broker log (tail) ---" >&2
    tail -30 "$WORK/broker.log" >&2
fi
echo "test result: $([ "$failed" -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed; $ignored ignored"
[ "$failed" -eq 0 ]
