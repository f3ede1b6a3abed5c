#!/usr/bin/env bash
# Queen's own JavaScript client suites, unchanged, against the broker (acceptance):
#   tests/queen_js.sh postgres://postgres@127.0.0.1:5498/queen_test [human|stream|TEST]...
# The client is a vendored copy of Queen's `clients/client-js` (tests/queen-js; its
# origin, the two URLs substituted in it, and the tests known to differ with why:
# tests/queen-js/KNOWN_DIFFERENCES.md). Copies it to target/queen-js, installs its locked
# dependencies there with `npm ci` (only when package-lock.json changed; never into the
# source tree), makes a fresh database `queen_js` with the extension beside the one URL
# names (dropped and made again each run), builds queen-broker (debug), starts it on a
# free loopback port against it, and runs `node test-v2/run.js human` (the client suite)
# and `node test-v2/run.js stream` (the streams suite), both by default (or one test by
# its name). Each Queen test is one result line; a failure of a test listed in
# KNOWN_DIFFERENCES.md is "ignored", any other failure fails; each suite's whole output
# stays in target/queen-js/SUITE.log. Without node and npm it prints one skip line.
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
SUITE=queen_js
. tests/lib.sh

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "=== queen_js skipped: node and npm are not installed (apt-get install nodejs npm)"
    exit 0
fi

cleanup() {
    broker_stop
    rm -rf "$WORK"
}
trap cleanup EXIT

# 1. The client: sources copied fresh (node_modules kept), dependencies from the lock file.
mkdir -p "$RUN"
rm -rf "$RUN/client-v2" "$RUN/test-v2"
cp -r "$SRC/client-v2" "$SRC/test-v2" "$SRC/package.json" "$SRC/package-lock.json" "$RUN/" ||
    setup_failed copy "copying $SRC to $RUN failed"
# The two substitutions (KNOWN_DIFFERENCES.md): run.js and maintenance.js name their
# broker as a literal http://localhost:6632; they take QUEEN_URL, which the stream and
# auth tests already read.
sed -i "s|baseUrls: \['http://localhost:6632'\]|baseUrls: [process.env.QUEEN_URL]|" "$RUN/test-v2/run.js"
sed -i "s|const API_URL = 'http://localhost:6632';|const API_URL = process.env.QUEEN_URL;|" \
    "$RUN/test-v2/maintenance.js"
grep -q "baseUrls: \[process.env.QUEEN_URL\]" "$RUN/test-v2/run.js" &&
    grep -q "const API_URL = process.env.QUEEN_URL;" "$RUN/test-v2/maintenance.js" ||
    setup_failed patch "test-v2/run.js or maintenance.js no longer has the line the broker URL is substituted in"
stamp=$RUN/node_modules/.queen-js-lock
want=$(sha256sum "$SRC/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    (cd "$RUN" && npm ci --no-audit --no-fund --loglevel=error >"$WORK/npm.log" 2>&1) ||
        setup_failed npm "npm ci in $RUN failed: $(tail -20 "$WORK/npm.log")"
    echo "$want" >"$stamp"
fi

# 2. A database of its own, made afresh: the suite's queue names are fixed, and its
# cleanup (raw SQL on Queen's tables) is not run on this project's (below).
DB_URL=${URL%/*}/queen_js
psql "$URL" -qAt -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS queen_js WITH (FORCE)" \
    -c "CREATE DATABASE queen_js" >"$WORK/db.log" 2>&1 &&
    psql "$DB_URL" -qAt -v ON_ERROR_STOP=1 -c "CREATE EXTENSION queen_ack" >>"$WORK/db.log" 2>&1 ||
    setup_failed database "creating the database queen_js beside $URL failed: $(cat "$WORK/db.log")"

# 3. The broker.
# A push spool as scripts/run.sh gives it (Queen's server has its file buffer by
# default; the maintenance test pushes through it), an encryption key of this run's own
# (the suite configures a queue with encryptionEnabled, which a broker without a key
# refuses), and maintenance every 2 s (retention.js: "the server needs to be started
# with RETENTION_INTERVAL=2000").
broker_start "$DB_URL" "$WORK/broker.log" QUEEN_SPOOL_DIR="$WORK/spool" \
    QUEEN_ENCRYPTION_KEY="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" QUEEN_MAINTENANCE_INTERVAL_MS=2000

# 4. The suites. run.js opens a pg pool of its own (PG_HOST, PG_PORT, PG_DB, PG_USER,
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
    (cd "$RUN" && QUEEN_URL=$BROKER_BASE PG_HOST=${hostport%%:*} PG_PORT=${hostport##*:} \
        PG_DB=postgres PG_USER=$pg_user PG_PASSWORD=unused \
        timeout "${QUEEN_JS_TIMEOUT:-1200}" node test-v2/run.js "$suite") >"$RUN/$suite.log" 2>&1
    rc=$?
    # run.js prints "✅|❌ name: message" per test after the "Results:" line.
    results=$(sed -n '/^Results:$/,/^====/p' "$RUN/$suite.log" | grep -E '^(✅|❌) ')
    if [ -z "$results" ]; then
        echo "test queen_js::$suite::harness ... FAILED"
        echo "node test-v2/run.js $suite exited with status $rc and printed no results:" >&2
        tail -30 "$RUN/$suite.log" >&2
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
