#!/usr/bin/env bash
# The documentation's examples, run as written. Every indented block that follows a
# `<!-- run: psql -->` marker in README.md or docs/*.md is fed to psql (one session per
# block, in a fresh database `queen_readme`); every block after `<!-- run: sh -->` runs
# in bash (set -euo pipefail) against a broker started here on that database, with its
# `localhost:6632` pointed at that broker and curl failing on an HTTP error status.
# Blocks run in file order: README.md first, then docs/*.md by name, each file top to
# bottom; they share the database, so a later block may use what an earlier one made.
# Prints cargo-style lines and a result line.
#   tests/readme_examples.sh <postgres-superuser-url>
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/readme_examples.sh <postgres-url>}
DB=${URL%/*}/queen_readme
WORK=$(mktemp -d /tmp/queen-readme.XXXXXX)
SUITE=readme
. tests/lib.sh
cleanup() {
    broker_stop
    rm -rf "$WORK"
}
trap cleanup EXIT

psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS queen_readme WITH (FORCE)" -c "CREATE DATABASE queen_readme" >/dev/null ||
    setup_failed database "cannot create queen_readme"
psql "$DB" -X -qAt -c "CREATE EXTENSION queen_ack" >/dev/null || setup_failed extension "CREATE EXTENSION failed"

broker_start "$DB" "$WORK/broker.log"

# The marked blocks, one file each: NNN-kind-line-where (where: "" for README.md,
# "docs_<page>_" for docs/<page>.md).
python3 - "$WORK" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
n = 0
for path in ["README.md"] + sorted(glob.glob("docs/*.md")):
    where = "" if path == "README.md" else "docs_" + re.sub(r"\W", "_", os.path.basename(path)[:-3]) + "_"
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"<!-- run: (psql|sh) -->", lines[i])
        i += 1
        if not m:
            continue
        start = i
        while i < len(lines) and not lines[i].strip():
            i += 1
        block = []
        while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
            block.append(lines[i][4:])
            i += 1
        n += 1
        with open(f"{out}/{n:03d}-{m.group(1)}-{start}-{where}", "w") as f:
            f.write("\n".join(block).rstrip() + "\n")
PY

for f in "$WORK"/[0-9]*; do
    name=$(basename "$f")
    kind=$(echo "$name" | cut -d- -f2)
    line=$(echo "$name" | cut -d- -f3)
    where=$(echo "$name" | cut -d- -f4)
    if [ "$kind" = psql ]; then
        psql "$DB" -X -v ON_ERROR_STOP=1 -q -f "$f" >"$WORK/out" 2>&1
    else
        sed "s/localhost:6632/127.0.0.1:$BROKER_PORT/g" "$f" >"$WORK/script"
        bash -c 'set -euo pipefail
                 curl() { command curl --fail-with-body "$@"; }
                 . "$1"' _ "$WORK/script" >"$WORK/out" 2>&1
    fi
    rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); echo "test readme::${where}${kind}_block_at_line_$line ... ok"
    else
        failed=$((failed + 1)); echo "test readme::${where}${kind}_block_at_line_$line ... FAILED"
        sed 's/^/    /' "$WORK/out" | tail -20
    fi
    [ -n "${QUEEN_README_TRACE:-}" ] && sed 's/^/    | /' "$WORK/out"
done
broker_stop
psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS queen_readme WITH (FORCE)" >/dev/null 2>&1
[ $((passed + failed)) -gt 0 ] || { failed=1; echo "test readme::no_marked_blocks ... FAILED"; }
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
