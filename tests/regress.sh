#!/usr/bin/env bash
# The SQL behaviour tests: tests/pg_regress/sql/NAME.sql, typed as a reader types them in
# psql, and their expected output tests/pg_regress/expected/NAME.out (pg_regress's layout,
# the one `cargo pgrx regress` uses), run by PostgreSQL's own pg_regress against a
# running test cluster (tests/cluster.sh, or tests/citus.sh's coordinator):
#   tests/regress.sh <postgres-url> [NAME...]
# Every file gets a fresh empty database and creates the extension itself. With
# QUEEN_TEST_CITUS=1 the databases are made on every node of the Citus cluster
# (tests/testdb.sh), the files install the extension distributed, and the citus_*.sql
# files run too (only there). An output that differs on Citus has its own expected file
# NAME_1.out: pg_regress accepts whichever alternative matches.
# Prints one cargo-style line per file (the diff under a failure) and a result line.
# Results land in target/regress[-citus]/NAME/ (results/NAME.out, regression.diffs).
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/regress.sh <postgres-url> [NAME...]}
shift
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
# What a reader sees in psql too: no NOTICEs of IF EXISTS and the like in the outputs.
export PGOPTIONS="-c client_min_messages=warning"
DIR=tests/pg_regress
. tests/testdb.sh
if (($#)); then
    names=("$@")
else
    names=()
    for f in "$DIR"/sql/*.sql; do
        n=$(basename "$f" .sql)
        [[ $n == citus_* && -z ${QUEEN_TEST_CITUS:-} ]] && continue
        names+=("$n")
    done
fi
testdb_suite regress "$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress" \
    "$DIR" "$PWD/target/regress${QUEEN_TEST_CITUS:+-citus}" "" "${names[@]}"
