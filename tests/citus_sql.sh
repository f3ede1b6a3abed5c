#!/usr/bin/env bash
# The Citus checks that need clients at once (docs/citus.md), on the cluster of tests/citus.sh:
#   tests/citus_sql.sh <coordinator-url>       (the URL `tests/citus.sh start` printed)
# Four first pushes to one new partition at once, and queue-level pops from four pgbench
# clients that must never deadlock. Everything one session shows in a fixed output is a
# regression file (tests/pg_regress/sql/citus_*.sql, run by tests/regress.sh with
# QUEEN_TEST_CITUS=1): the layout queen.distribute() makes, the walk-through and every
# per-partition entry point delegated to its worker, the calls that span two workers,
# distributing a database that already holds rows, DROP EXTENSION on every node.
# Prints cargo-style lines and a result line.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/citus_sql.sh <coordinator-url>}
export PGOPTIONS="-c client_min_messages=warning"
DBNAME=queen_citus
DB=${URL%/*}/$DBNAME
passed=0 failed=0
SUITE=citus
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sql() { psql "$DB" -X -qAt -v ON_ERROR_STOP=1 -c "$1" 2>&1; }

bash tests/citus.sh createdb "$DBNAME"
sql "CREATE EXTENSION queen_ack" >/dev/null
sql "SELECT queen.distribute()" >/dev/null

# Two producers create one new partition at once: one registry row, both pushes queued.
for i in 1 2 3 4; do
    sql "SELECT queen.push('race', '[{\"r\":$i}]', ARRAY['race-$i'], 'New')->>'status'" >"/tmp/qa-citus-race.$$.$i" &
done
wait
check concurrent_first_pushes_create_one_partition \
    "$(cat /tmp/qa-citus-race.$$.* | sort | uniq -c | awk '{print $1 " " $2}')|$(sql "SELECT count(*) FROM queen.partition_names WHERE name = 'New'")|$(sql "SELECT last_offset FROM queen.log_partitions WHERE name = 'New'")" \
    "4 queued|1|3"
rm -f /tmp/qa-citus-race.$$.*

# Queue-level pops of named groups from four clients at once, of one registered group and
# of a new group each (first contacts): none may deadlock. A registration locked the queue
# row FOR KEY SHARE on every pop; on a reference table Citus takes that as two shard
# resource locks, one after the other, and two pops taking them at once deadlocked (two
# pops in three failed with 40P01, the broker answered 503).
PGBENCH=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --bindir)/pgbench
sql "SELECT queen.push('busy', '[1,2,3,4]', ARRAY['b1','b2','b3','b4'])" >/dev/null
sql "SELECT count(*) FROM queen.pop('busy', NULL, 'known')" >/dev/null
echo "SELECT count(*) FROM queen.pop('busy', NULL, 'known');" >"/tmp/qa-citus-pop.$$.known"
printf '%s\n' '\set g random(1, 1000000000)' "SELECT count(*) FROM queen.pop('busy', NULL, 'g' || :g);" >"/tmp/qa-citus-pop.$$.first"
for kind in known first; do
    out=$("$PGBENCH" -n -c 4 -j 4 -T 3 --max-tries=1 --failures-detailed -f "/tmp/qa-citus-pop.$$.$kind" "$DB" 2>&1)
    check "concurrent_queue_pops_of_a_${kind}_group_never_deadlock" \
        "$(echo "$out" | sed -n 's/^number of deadlock failures: \([0-9]*\).*/\1/p')|$(echo "$out" | grep -c '^number of transactions actually processed: [1-9]')" "0|1"
done
rm -f /tmp/qa-citus-pop.$$.*

bash tests/citus.sh dropdb "$DBNAME"
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
