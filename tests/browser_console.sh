#!/usr/bin/env bash
# The operator console in headless Chromium (tests/browser/console.py):
#   tests/browser_console.sh postgres://postgres@127.0.0.1:5498/queen_test
# Debian's `chromium` (installed here when missing: apt-get install chromium) driven by
# Playwright for Python (tests/browser/requirements.txt, in target/py-browser-venv; its
# own browser downloads are never used: the script launches /usr/bin/chromium). Starts a
# debug queen-broker sampling every 500 ms, runs the views and the clicks, stops it.
# Screenshots and timings land in target/browser/ (QUEEN_CONSOLE_SHOTS=DIR copies the
# screenshots there too, e.g. docs/images). Without Chromium it prints one skip line.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/browser_console.sh <postgres-url>}
TARGET=${CARGO_TARGET_DIR:-target}
VENV=$TARGET/py-browser-venv
REQ=tests/browser/requirements.txt
OUT=$TARGET/browser
WORK=$(mktemp -d /tmp/queen-browser.XXXXXX)
SUITE=browser
. tests/lib.sh

cleanup() {
    broker_stop
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ ! -x /usr/bin/chromium ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
        >"$WORK/apt.log" 2>&1 || true
fi
if [ ! -x /usr/bin/chromium ]; then
    echo "=== browser skipped: Debian's chromium could not be installed (apt-get install chromium)"
    echo "test result: ok. 0 passed; 0 failed"
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2 || setup_failed venv "python3 -m venv failed"
fi
stamp=$VENV/.queen-browser-requirements
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" -c 'import playwright' 2>/dev/null; then
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2 ||
        setup_failed venv "pip install -r $REQ failed"
    echo "$want" >"$stamp"
fi

broker_start "$URL" "$WORK/broker.log" QUEEN_HISTORY_SAMPLE_MS=500 QUEEN_MAINTENANCE_INTERVAL_MS=0

rm -rf "$OUT"
timeout 180 "$VENV/bin/python" tests/browser/console.py "$BROKER_BASE" "$URL" "$OUT" | tee "$WORK/out"
rc=${PIPESTATUS[0]}
passed=$(grep -c '^test browser::.* \.\.\. ok$' "$WORK/out")
failed=$(grep -c '^test browser::.* \.\.\. FAILED$' "$WORK/out")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    echo "test browser::harness ... FAILED"
    failed=1
fi
if [ -n "${QUEEN_CONSOLE_SHOTS:-}" ] && [ "$failed" -eq 0 ]; then
    mkdir -p "$QUEEN_CONSOLE_SHOTS" && cp "$OUT"/console-*.png "$QUEEN_CONSOLE_SHOTS"/
fi
[ "$failed" -eq 0 ] || { echo "--- broker log (tail) ---" >&2; tail -30 "$WORK/broker.log" >&2; }
if [ "$failed" -eq 0 ]; then s=ok; else s=FAILED; fi
echo "test result: $s. $passed passed; $failed failed"
[ "$failed" -eq 0 ]
