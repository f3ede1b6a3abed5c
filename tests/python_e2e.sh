#!/usr/bin/env bash
# End-to-end test of the broker with the real Queen MQ Python SDK (PyPI `queen-mq`, the
# version pinned in tests/python/requirements.txt):
#   tests/python_e2e.sh postgres://postgres@127.0.0.1:5498/queen_test
# Needs a database with the extension installed (tests/cluster.sh start prints one).
# Creates/reuses a virtualenv under target/py-venv, builds queen-broker (debug), starts it
# on a free loopback port against that database, runs tests/python/e2e.py, stops the
# broker. Prints a cargo-style result line; exits non-zero on any failure.
# Env: QUEEN_E2E_TRACE=1 also dumps every HTTP exchange of passing scenarios.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/python_e2e.sh <postgres-url>}
TARGET=${CARGO_TARGET_DIR:-target}
VENV=$TARGET/py-venv
REQ=tests/python/requirements.txt
WORK=$(mktemp -d /tmp/queen-py-e2e.XXXXXX)
BROKER_PID=

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

# A setup step that fails counts as one failed test, so the summary line is always printed.
setup_failed() { # name, message
    echo "test python::$1 ... FAILED"
    echo "$2" >&2
    echo "test result: FAILED. 0 passed; 1 failed"
    exit 1
}

# 1. The virtualenv: created once; pip runs only when requirements.txt changed.
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2 ||
        setup_failed venv "python3 -m venv failed (Debian/Ubuntu: apt-get install -y python3-venv)"
fi
stamp=$VENV/.queen-e2e-requirements
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" -c 'import queen' 2>/dev/null; then
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2 ||
        setup_failed venv "pip install -r $REQ failed"
    echo "$want" >"$stamp"
fi

# 2. The broker.
cargo build -q -p queen_broker >&2 || setup_failed broker_build "cargo build -p queen_broker failed"
BIN=$TARGET/debug/queen-broker
PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
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
/health -> $(curl -sS "http://127.0.0.1:$PORT/health" 2>&1)
$(tail -20 "$WORK/broker.log")"

# 3. The scenarios.
timeout 120 "$VENV/bin/python" tests/python/e2e.py "http://127.0.0.1:$PORT" | tee "$WORK/out"
rc=${PIPESTATUS[0]}
passed=$(grep -c '^test python::.* \.\.\. ok$' "$WORK/out")
failed=$(grep -c '^test python::.* \.\.\. FAILED$' "$WORK/out")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    # Crashed or timed out outside any scenario.
    echo "test python::harness ... FAILED"
    echo "e2e.py exited with status $rc" >&2
    failed=1
fi
if [ "$failed" -ne 0 ]; then
    echo "--- broker log (tail) ---" >&2
    tail -30 "$WORK/broker.log" >&2
fi
echo "test result: $([ "$failed" -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ "$failed" -eq 0 ]
