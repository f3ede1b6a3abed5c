#!/usr/bin/env bash
# A psql walk-through (the README's, checked step by step), run for real against a test cluster, plus
# CREATE/DROP EXTENSION leaving nothing behind. Prints a cargo-style result line.
# QUEEN_TEST_CITUS=1: the same on a Citus cluster (tests/testdb.sh), distributed.
set -uo pipefail
URL=$1
DB=${URL%/*}/queen_smoke
export PGOPTIONS="-c client_min_messages=warning"
. "$(dirname "$0")/testdb.sh"
testdb_create "$URL" queen_smoke
passed=0 failed=0
check() { # name, expected, sql[, filter of the output]
    local got
    got=$(psql "$DB" -qAt -v ON_ERROR_STOP=1 -c "$3" 2>&1)
    [ -z "${4:-}" ] || got=$(echo "$got" | eval "$4" 2>&1)
    if [ "$got" = "$2" ]; then
        passed=$((passed + 1)); echo "test smoke::$1 ... ok"
    else
        failed=$((failed + 1)); echo "test smoke::$1 ... FAILED: expected [$2] got [$got]"
    fi
}
check create_extension "" "$(testdb_install_sql)"
check push "queued" "SELECT queen.push('orders', '[{\"id\":1},{\"id\":2},null]', ARRAY['t1','t2','t3'])->>'status'"
check pop_decoded "0|t1|{\"id\": 1}
1|t2|{\"id\": 2}
2|t3|null" "SELECT r_offset, r_transaction_id, r_payload FROM queen.pop('orders', p_batch => 10, p_lease_seconds => 30)"
# As the walk-through writes it: the partition id and lease id of the pop as literals (on
# Citus such a call is delegated to the worker holding the partition).
read -r pid lease < <(psql "$DB" -qAt -F ' ' -c "SELECT partition_id, worker_id FROM queen.log_leases")
check ack_by_txn "3|true" "SELECT queen.ack('$pid', '$lease', ARRAY['t1','t2','t3'])" "jq -r '\"\\(.acked)|\\(.leaseReleased)\"'"
check decode "3" "SELECT count(*) FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d"
check xxh3_hello "b5e9c1ad071b3e7fc779cfaa5e523818" "SELECT queen.xxh3_128_hex('hello')"
check drop_extension_leaves_nothing "0|0" "DROP EXTENSION queen_ack; SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'), (SELECT count(*) FROM pg_proc WHERE proname LIKE 'log_%_v1')"
check recreate_extension "1" "$(testdb_install_sql); SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'"
check create_extension_keeps_callers_search_path '"$user", public' "DROP EXTENSION queen_ack; CREATE EXTENSION queen_ack; SHOW search_path"
testdb_drop "$URL" queen_smoke
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
