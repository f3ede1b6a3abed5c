#!/usr/bin/env bash
# Races between retention, first pops, pushes and queue deletion, driven for real: two or
# three psql sessions on a test cluster, sequenced by held transactions and by waiting
# until a session is blocked on a lock (pg_stat_activity), never by sleeping and hoping;
# then bounded loops (pgbench, --max-tries=1) that must see no deadlock (40P01) and lose
# no message uncounted. The lock order they check is in docs/contract.md (conventions)
# and docs/decisions.md, "Lock order".
#   tests/races.sh <postgres-url>     (a superuser URL of tests/cluster.sh's cluster)
# QUEEN_RACE_ROUNDS (default 200): transactions per pgbench client in the loops.
# One node only: on Citus a coordinator session waiting for a worker is not a Lock wait
# in its pg_stat_activity, so the "waits for" checks do not apply there.
# Prints cargo-style lines and a `test result:` line.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/races.sh <postgres-url>}
ROUNDS=${QUEEN_RACE_ROUNDS:-200}
export PGOPTIONS="-c client_min_messages=warning"
DB=${URL%/*}/queen_races
PGBIN=$(dirname "$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)")
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "test races::$1 ... ok"; }
fail() { failed=$((failed + 1)); echo "test races::$1 ... FAILED${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "expected [$3] got [$2]"; fi; }
sql() { psql "$DB" -X -qAt -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
. "$(dirname "$0")/testdb.sh"
WORK=$(mktemp -d /tmp/qa-races.XXXXXX)

# --- Sessions: a psql reading from a fifo; `run NAME SQL` sends a statement and returns
# at once; `done_ NAME` waits until everything sent so far has finished (a marker line).
declare -A FD PID MARK
open() { # name
    rm -f "$WORK/$1.in" "$WORK/$1.out"
    mkfifo "$WORK/$1.in"
    # The session must not inherit the write ends of the other sessions' fifos (they
    # would never see end of input).
    (
        for f in "${FD[@]}"; do eval "exec $f>&-"; done
        PGAPPNAME="race_$1" exec psql "$DB" -X -qAt <"$WORK/$1.in" >"$WORK/$1.out" 2>&1
    ) &
    PID[$1]=$!
    local fd
    exec {fd}>"$WORK/$1.in"
    FD[$1]=$fd
    MARK[$1]=0
}
run() { printf '%s\n' "$2" >&"${FD[$1]}"; }
done_() { # name [timeout-s]: 0 when the session finished everything sent so far
    MARK[$1]=$((MARK[$1] + 1))
    local m="@@mark-$1-${MARK[$1]}" t=$((${2:-30} * 20))
    printf '\\echo %s\n' "$m" >&"${FD[$1]}"
    for _ in $(seq "$t"); do
        grep -q -- "$m" "$WORK/$1.out" && return 0
        sleep 0.05
    done
    return 1
}
blocked() { # name [timeout-s]: 0 once the session waits for a lock, 1 if it never does
    local t=$((${2:-10} * 20))
    for _ in $(seq "$t"); do
        [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'race_$1' AND wait_event_type = 'Lock'")" = 1 ] && return 0
        sleep 0.05
    done
    return 1
}
close() { # name
    local fd=${FD[$1]}
    exec {fd}>&-
    unset "FD[$1]"
    wait "${PID[$1]}" 2>/dev/null
}
out() { grep -v '^@@mark' "$WORK/$1.out"; }
cleanup() {
    local fd
    for s in "${!FD[@]}"; do fd=${FD[$s]}; exec {fd}>&- 2>/dev/null; done
    for p in "${PID[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT

fresh() {
    testdb_create "$URL" queen_races
    sql "$(testdb_install_sql)" >/dev/null
    sql "ALTER DATABASE queen_races SET deadlock_timeout = '200ms'" >/dev/null
}
pid_of() { sql "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '$1' AND p.name = '$2'"; }
age() { # queue seconds: every segment of the queue becomes that much older
    sql "UPDATE queen.log_segments s SET created_at = s.created_at - make_interval(secs => $2)
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = s.partition_id AND q.name = '$1'" >/dev/null
}
# 30 messages in each of P1 and P2 (three segments of 10), drained by group gA; aged an
# hour; then 5 young ones each. Configured with the given retention options.
setup_drained() { # queue options-json
    sql "SELECT queen.configure_queue_v1('$1', NULL, NULL, '$2')" >/dev/null
    for p in P1 P2; do
        for s in 0 1 2; do sql "SELECT queen.push('$1', '[$(seq -s, $((s * 10)) $((s * 10 + 9)))]', NULL, '$p')" >/dev/null; done
    done
    sql "SELECT count(*) FROM queen.log_pop_queue_v1('$1', 'gA', 1000, 60, 'wA', true, 'all', '', 2)" >/dev/null
    age "$1" 3600
    for p in P1 P2; do sql "SELECT queen.push('$1', '[30,31,32,33,34]', NULL, '$p')" >/dev/null; done
}
# No cursor is ever left below its partition's log start (what retention took from a
# group is counted in its cursor's `evicted`), and the two lag views agree.
invariants() { # queue -> "below|disagree"
    echo "$(sql "SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
                  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '$1' AND c.committed < p.log_start - 1")|$(
        sql "SELECT count(*) FROM queen.consumer_lag l
               JOIN queen.queue_stats_v1(NULL, '$1') s ON s.r_partition_id = l.partition_id AND s.r_consumer_group = l.consumer_group
              WHERE l.queue = '$1' AND l.lag IS DISTINCT FROM s.r_lag")"
}
drain() { # queue group -> messages delivered (auto-ack)
    local n total=0
    for _ in $(seq 1 20); do
        n=$(sql "SELECT COALESCE(sum(r_take), 0) FROM queen.log_pop_queue_v1('$1', '$2', 1000, 60, 'w', true, 'all', '', 10)")
        [ "$n" = 0 ] && break
        total=$((total + n))
    done
    echo "$total"
}
evicted() { sql "SELECT COALESCE(sum(c.evicted), 0) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
                   JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '$1' AND c.consumer_group = '$2'"; }
live() { sql "SELECT sum(p.last_offset - p.log_start + 1) FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '$1'"; }

fresh

# 1. A retention step holds both partitions (rule 2, the issue's repro); a new group's
# first pop must wait for it and then start at the new log start: nothing it could have
# read is lost uncounted.
setup_drained r1 '{"completedRetentionSeconds": 60}'
open A
run A "BEGIN;"
run A "SELECT queen.log_retention_step_v1('$(pid_of r1 P1)', NULL, clock_timestamp(), 1000);"
run A "SELECT queen.log_retention_step_v1('$(pid_of r1 P2)', NULL, clock_timestamp(), 1000);"
done_ A
open B
run B "SELECT count(*) FROM queen.log_pop_queue_v1('r1', 'gN', 1, 60, 'wN', true, 'all', '', 1);"
if blocked B 5; then ok first_pop_of_a_new_group_waits_for_a_retention_step; else fail first_pop_of_a_new_group_waits_for_a_retention_step "the pop did not wait: $(out B)"; fi
run A "COMMIT;"
done_ A
done_ B
close A
close B
check first_pop_after_a_step_leaves_no_cursor_below_the_log_start "$(invariants r1)" "0|0"
check first_pop_after_a_step_then_reads_everything_left "$(($(drain r1 gN) + 1 + $(evicted r1 gN)))" "$(live r1)"

# 2. The other order: the new group's first pop is in flight (rule 1 this time); the step
# must wait for it, then count what it takes from the new group as evicted.
setup_drained r2 '{"retentionSeconds": 60}'
open B
run B "BEGIN;"
run B "SELECT count(*) FROM queen.log_pop_queue_v1('r2', 'gN', 1, 60, 'wN', true, 'all', '', 1);"
done_ B
open A
run A "SELECT queen.log_retention_step_v1('$(pid_of r2 P1)', clock_timestamp(), NULL, 1000);"
if blocked A 5; then ok retention_step_waits_for_a_first_pop; else fail retention_step_waits_for_a_first_pop "the step did not wait: $(out A)"; fi
run B "COMMIT;"
done_ B
done_ A
run A "SELECT queen.log_retention_step_v1('$(pid_of r2 P2)', clock_timestamp(), NULL, 1000);"
done_ A
close A
close B
check step_after_a_first_pop_leaves_no_cursor_below_the_log_start "$(invariants r2)" "0|0"
# gN started at offset -1 on both partitions: 70 messages, each delivered or evicted.
check step_after_a_first_pop_counts_every_loss "$(($(drain r2 gN) + 1 + $(evicted r2 gN)))" "70"

# 3. delete_queue_v1 against a retention step while an ack-like holder has a lease row
# (the issue's repro): one lock order, so no deadlock and no error.
sql "SELECT queen.configure_queue_v1('r3', NULL, NULL, '{\"retentionSeconds\": 60}')" >/dev/null
sql "SELECT queen.push('r3', '[1,2,3]')" >/dev/null
sql "SELECT count(*) FROM queen.log_pop_queue_v1('r3', 'gZ', 1, 60, 'w', false)" >/dev/null
age r3 3600
P3=$(pid_of r3 Default)
open H
run H "BEGIN;"
run H "SELECT 1 FROM queen.log_leases WHERE partition_id = '$P3' AND consumer_group = 'gZ' FOR UPDATE;"
done_ H
open D
run D "SELECT queen.delete_queue_v1('r3')->>'existed';"
blocked D 5 || fail delete_waits_for_the_lease_holder "it did not wait: $(out D)"
open S
# The step holds the partition row and never waits for a lease row: it leaves the
# partition for the next run (busy) and deletes nothing.
run S "SELECT (r->>'busy') || ',' || (r->>'deleted') FROM queen.log_retention_step_v1('$P3', clock_timestamp(), NULL, 1000) r;"
done_ S 10
run H "COMMIT;"
done_ H
done_ D
close H
close D
close S
check delete_queue_and_retention_step_do_not_deadlock "$(out D)|$(out S)" "true|true,0"

# 4. delete_queue_v1 against a push spanning both partitions of the queue, the first
# created partition having the higher id (the cascade deletes in creation order, pushes
# lock in ascending id): the push holds one partition and then takes the other.
for _ in $(seq 1 40); do
    sql "SELECT queen.delete_queue_v1('r4')" >/dev/null
    sql "SELECT queen.push('r4', '[1]', NULL, 'A'), queen.push('r4', '[2]', NULL, 'B')" >/dev/null
    [ "$(sql "SELECT (SELECT id FROM queen.log_partitions WHERE name = 'A' AND queue_id = q.id) >
                     (SELECT id FROM queen.log_partitions WHERE name = 'B' AND queue_id = q.id)
                FROM queen.queues q WHERE name = 'r4'")" = t ] && break
done
open T
run T "BEGIN;"
run T "SELECT queen.push('r4', '[3]', NULL, 'B') IS NOT NULL;"
done_ T
open D
run D "SELECT queen.delete_queue_v1('r4')->>'existed';"
blocked D 5 || fail delete_waits_for_the_push "it did not wait: $(out D)"
run T "SELECT queen.push('r4', '[4]', NULL, 'A') IS NOT NULL;"
done_ T 10
run T "COMMIT;"
done_ T
done_ D
close T
close D
check delete_queue_and_a_two_partition_push_do_not_deadlock "$(out T | tr "\n" ,)|$(out D)" "t,t,|true"

# 4b. A new group's first queue-level pop seeds a cursor on every partition it lists,
# holding their rows (FOR SHARE, ascending); a partition created after the list and
# sorting below them, and a push holding that one and waiting for the highest: the pop
# must not wait for the new partition (it leaves it to the next pop), or the two deadlock.
for p in A B C D E F G H; do sql "SELECT queen.push('r6', '[1]', NULL, '$p')" >/dev/null; done
HI=$(sql "SELECT p.name FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'r6' ORDER BY p.id DESC LIMIT 1")
open H
run H "BEGIN;"
run H "SELECT 1 FROM queen.log_partitions WHERE id = '$(pid_of r6 "$HI")' FOR NO KEY UPDATE;"
done_ H
open B
run B "SELECT sum(r_take) FROM queen.log_pop_queue_v1('r6', 'gLate', 100, 60, 'wL', true, 'all', '', 20);"
blocked B 5 || fail first_pop_waits_for_the_highest_partition "it did not wait: $(out B)"
LO=
for i in $(seq 1 40); do
    sql "SELECT queen.push('r6', '[2]', NULL, 'N$i')" >/dev/null
    [ "$(sql "SELECT '$(pid_of r6 "N$i")' < '$(pid_of r6 "$HI")'")" = t ] && { LO=N$i; break; }
done
open X
run X "BEGIN;"
run X "SELECT queen.push('r6', '[3]', NULL, '$LO') IS NOT NULL;"
done_ X
run X "SELECT queen.push('r6', '[4]', NULL, '$HI') IS NOT NULL;"
blocked X 5 || fail push_waits_for_the_highest_partition "it did not wait: $(out X)"
run H "COMMIT;"
done_ H
done_ B 10
run X "COMMIT;"
done_ X 10
close H
close B
close X
# The pop served the eight listed partitions and the new ones above them (one message
# each: the loop's $i tries, the last being the one below), not the one below.
check first_pop_and_a_push_into_a_partition_created_meanwhile_do_not_deadlock "$(out B)|$(out X | tr "\n" ,)" "$((8 + i - 1))|t,t,"
check the_partition_left_alone_is_served_by_the_next_pop \
    "$(sql "SELECT sum(r_take) FROM queen.log_pop_queue_v1('r6', 'gLate', 100, 60, 'wL', true, 'all', '', 20) WHERE r_partition = '$LO'")" "2"

# 5. The loops: pushes spanning two partitions (log_push_multi_v1, as a fused flush
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
