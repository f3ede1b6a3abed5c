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
SUITE=python
. tests/lib.sh

cleanup() {
    broker_stop
    rm -rf "$WORK"
}
trap cleanup EXIT

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
broker_start "$URL" "$WORK/broker.log"

# 3. The scenarios.
timeout 120 "$VENV/bin/python" tests/python/e2e.py "$BROKER_BASE" | tee "$WORK/out"
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
