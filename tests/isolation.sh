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
DIR=tests/isolation
. tests/testdb.sh
# The schema `race` every spec's sessions use, in the spec's fresh database.
helpers() { # db-url outdir name
    psql "$1" -X -qAt -v ON_ERROR_STOP=1 -f "$DIR/helpers.sql" >"$2/helpers.log" 2>&1 && return
    echo "test isolation::$3 ... FAILED"
    cat "$2/helpers.log"
    return 1
}
if (($#)); then
    names=("$@")
else
    names=()
    for f in "$DIR"/specs/*.spec; do names+=("$(basename "$f" .spec)"); done
fi
testdb_suite isolation "$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress" \
    "$DIR" "$PWD/target/isolation" helpers "${names[@]}"
