#!/usr/bin/env bash
# Bounded loops (pgbench, --max-tries=1) racing retention, first pops of new groups,
# pushes spanning two partitions and queue deletions at once: they must see no deadlock
# (40P01), no error, and lose no message uncounted. The lock order they check is in
# docs/contract.md (conventions) and docs/decisions.md, "Lock order". The deterministic
# interleavings of the same races are isolation specs (tests/isolation.sh); these loops
# are not interleavings but volume, which the isolation tester does not do.
#   tests/races.sh <postgres-url>     (a superuser URL of tests/cluster.sh's cluster)
# QUEEN_RACE_ROUNDS (default 200): transactions per pgbench client in the loops.
# Prints cargo-style lines and a `test result:` line.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/races.sh <postgres-url>}
ROUNDS=${QUEEN_RACE_ROUNDS:-200}
export PGOPTIONS="-c client_min_messages=warning"
DB=${URL%/*}/queen_races
PGBIN=$(dirname "$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)")
passed=0 failed=0
SUITE=races
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sql() { psql "$DB" -X -qAt -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
. "$(dirname "$0")/testdb.sh"
WORK=$(mktemp -d /tmp/qa-races.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

testdb_create "$URL" queen_races
sql "$(testdb_install_sql)" >/dev/null
sql "ALTER DATABASE queen_races SET deadlock_timeout = '200ms'" >/dev/null
# No cursor is ever left below its partition's log start (what retention took from a
# group is counted in its cursor's `evicted`), and the two lag views agree.
invariants() { # queue -> "below|disagree"
    echo "$(sql "SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
                  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '$1' AND c.committed < p.log_start - 1")|$(
        sql "SELECT count(*) FROM queen.consumer_lag l
               JOIN queen.queue_stats_v1(NULL, '$1') s ON s.r_partition_id = l.partition_id AND s.r_consumer_group = l.consumer_group
              WHERE l.queue = '$1' AND l.lag IS DISTINCT FROM s.r_lag")"
}

# The loops: pushes spanning two partitions (log_push_multi_v1, as a fused flush
# sends them), retention steps, first pops of new groups and queue deletions, at once.
# Every 40P01 is a failure; 40001 (a push into a partition deleted under it; the broker
# retries) is allowed.
sql "SELECT queen.push('tpl', '[\"x\"]')" >/dev/null
H=$(sql "SELECT 'decode(' || quote_literal(encode(hashes, 'hex')) || ', ''hex'')' FROM queen.log_txns t JOIN queen.log_partitions p ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'tpl'")
B=$(sql "SELECT 'decode(' || quote_literal(encode(blob, 'hex')) || ', ''hex'')' FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'tpl'")
cat >"$WORK/push.sql" <<EOF
SELECT queen.log_push_multi_v1(ARRAY['rx', 'rx', 'rx'], ARRAY['A', 'B', 'A'], ARRAY[1, 1, 1], ARRAY[$H, $H, $H], ARRAY[-1, -1, -1]::bigint[], ARRAY[$B, $B, $B]);
SELECT queen.log_push_multi_v1(ARRAY['ry', 'rx', 'ry'], ARRAY['A', 'C', 'B'], ARRAY[1, 1, 1], ARRAY[$H, $H, $H], ARRAY[-1, -1, -1]::bigint[], ARRAY[$B, $B, $B]);
EOF
cat >"$WORK/delete.sql" <<'EOF'
SELECT queen.delete_queue_v1('rx');
EOF
cat >"$WORK/step.sql" <<'EOF'
SELECT queen.log_retention_step_v1(p.id, clock_timestamp(), clock_timestamp(), 100)
  FROM queen.partition_names p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.name = 'rx' ORDER BY random() LIMIT 1;
EOF
cat >"$WORK/pop.sql" <<'EOF'
\set g random(1, 1000000000)
SELECT count(*) FROM queen.log_pop_queue_v1('rx', 'g' || :g, 10, 60, 'w', true, 'all', '', 3);
SELECT count(*) FROM queen.log_pop_queue_v1('rx', NULL, 10, 60, 'w', false, 'all', '', 3);
EOF
sql "SELECT queen.configure_queue_v1('rx', NULL, NULL, '{\"retentionSeconds\": 1, \"completedRetentionSeconds\": 1, \"dedupWindowSeconds\": 0}')" >/dev/null
bench() { # log scripts...
    local log=$1
    shift
    "$PGBIN/pgbench" -n -c 6 -j 2 -t "$ROUNDS" --max-tries=1 --failures-detailed "$@" "$DB" >"$WORK/$log" 2>&1
}
deadlocks() { sed -n 's/.*deadlock failures: \([0-9]*\).*/\1/p' "$WORK/$1" | head -1; }
aborted() { grep -c 'aborted\|ERROR' "$WORK/$1"; }
bench loop_delete.log -f "$WORK/push.sql@4" -f "$WORK/delete.sql@1" -f "$WORK/step.sql@1" -f "$WORK/pop.sql@2"
check delete_pushes_steps_first_pops_in_a_loop_no_deadlock "$(deadlocks loop_delete.log)|$(aborted loop_delete.log)" "0|0"
[ "$(deadlocks loop_delete.log)|$(aborted loop_delete.log)" = "0|0" ] || tail -20 "$WORK/loop_delete.log"

# The same without deletions, on a queue that keeps its history: rule 1 and rule 2 racing
# first pops of new groups and pushes; afterwards no cursor below its log start and the
# two views agree (every message delivered to a group or counted as evicted for it).
cat >"$WORK/step_rz.sql" <<'EOF'
SELECT queen.log_retention_step_v1(p.id, clock_timestamp(), clock_timestamp(), 100)
  FROM queen.partition_names p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.name = 'rz' ORDER BY random() LIMIT 1;
EOF
sed 's/rx/rz/g; s/ry/rz/g' "$WORK/push.sql" >"$WORK/push_rz.sql"
sed 's/rx/rz/g' "$WORK/pop.sql" >"$WORK/pop_rz.sql"
sql "SELECT queen.configure_queue_v1('rz', NULL, NULL, '{\"retentionSeconds\": 1, \"completedRetentionSeconds\": 1, \"dedupWindowSeconds\": 0}')" >/dev/null
bench loop_retention.log -f "$WORK/push_rz.sql@3" -f "$WORK/step_rz.sql@2" -f "$WORK/pop_rz.sql@3"
check retention_and_first_pops_in_a_loop_no_deadlock "$(deadlocks loop_retention.log)|$(aborted loop_retention.log)" "0|0"
check retention_and_first_pops_in_a_loop_lose_nothing_uncounted "$(invariants rz)" "0|0"

testdb_drop "$URL" queen_races
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
