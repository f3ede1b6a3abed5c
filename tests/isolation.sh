#!/usr/bin/env bash
# The races between retention, first pops, pushes and queue deletion, as PostgreSQL's
# isolation tester writes them: tests/isolation/specs/NAME.spec (sessions, steps and the
# one interleaving that matters) and its expected output tests/isolation/expected/NAME.out,
# where a step that waits for a lock shows `<waiting ...>` and its result after the step
# that released it (`<... completed>`); a deadlock would show as an error there. Run by
# pg_isolation_regress (postgresql-server-dev-15 ships it beside pg_regress) against a
# running test cluster (tests/cluster.sh), one node only: on Citus a coordinator session
# waiting for a worker is not a lock wait the tester can see.
#   tests/isolation.sh <postgres-url> [NAME...]
# Every spec gets a fresh empty database holding tests/isolation/helpers.sql (schema
# `race`); its setup creates the extension. Prints one cargo-style line per spec (the diff
# under a failure) and a result line. Results land in target/isolation/NAME/.
# A spec's SQL blocks hold no brace: its scanner ends a block at the first "}" (jsonb
# options are written with jsonb_build_object).
# The bounded loops (no deadlock in N rounds) are not interleavings: tests/races.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/isolation.sh <postgres-url> [NAME...]}
shift
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PGOPTIONS="-c client_min_messages=warning"
ISOLATION=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress
if [ ! -x "$ISOLATION" ]; then
    echo "isolation: no pg_isolation_regress at $ISOLATION (Debian's postgresql-server-dev-15 ships it)"
    echo "test result: FAILED. 0 passed; 1 failed"
    exit 1
fi
DIR=tests/isolation
OUT=$PWD/target/isolation
. tests/testdb.sh
read -r host port user < <(python3 -c 'import sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
print(u.hostname or "127.0.0.1", u.port or 5432, u.username or "postgres")' "$URL")

if (($#)); then
    names=("$@")
else
    names=()
    for f in "$DIR"/specs/*.spec; do names+=("$(basename "$f" .spec)"); done
fi

passed=0 failed=0
for name in "${names[@]}"; do
    db=isolation_$name
    out=$OUT/$name
    rm -rf "$out"
    mkdir -p "$out"
    testdb_create "$URL" "$db"
    psql "${URL%/*}/$db" -X -qAt -v ON_ERROR_STOP=1 -f "$DIR/helpers.sql" >"$out/helpers.log" 2>&1 || {
        failed=$((failed + 1))
        echo "test isolation::$name ... FAILED"
        cat "$out/helpers.log"
        testdb_drop "$URL" "$db"
        continue
    }
    if testdb_regress_one isolation "$ISOLATION" "$DIR" "$out" "$db" "$name"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    testdb_drop "$URL" "$db"
done
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
