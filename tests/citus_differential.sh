#!/usr/bin/env bash
# The differential run (docs/citus.md): tests/citus_differential.py against a fresh database on
# one node and a fresh distributed one on the Citus cluster.
#   tests/citus_differential.sh <one-node-url> <citus-coordinator-url> [steps] [seed]
# (superuser URLs of tests/cluster.sh's and tests/citus.sh's clusters)
set -uo pipefail
cd "$(dirname "$0")/.."
ONE=${1:?usage: $0 <one-node-url> <citus-url> [steps] [seed]}
CITUS=${2:?usage: $0 <one-node-url> <citus-url> [steps] [seed]}
export PGOPTIONS="-c client_min_messages=warning"
. tests/testdb.sh
testdb_create "$ONE" queen_diff
psql "${ONE%/*}/queen_diff" -X -qAt -c "CREATE EXTENSION queen_ack" >/dev/null
QUEEN_TEST_CITUS=1 testdb_create "$CITUS" queen_diff
psql "${CITUS%/*}/queen_diff" -X -qAt -c "$(QUEEN_TEST_CITUS=1 testdb_install_sql)" >/dev/null
python3 tests/citus_differential.py "${ONE%/*}/queen_diff" "${CITUS%/*}/queen_diff" "${3:-400}" "${4:-15}"
rc=$?
testdb_drop "$ONE" queen_diff
QUEEN_TEST_CITUS=1 testdb_drop "$CITUS" queen_diff
exit $rc
