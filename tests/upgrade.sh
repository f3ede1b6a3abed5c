#!/usr/bin/env bash
# The upgrade test (docs/operations.md, "Upgrading"): a database created at every frozen version keeps every row
# through ALTER EXTENSION queen_ack UPDATE, goes on working, and ends with exactly the
# catalog of a fresh CREATE EXTENSION of the default version.
#
#   tests/upgrade.sh <postgres-url>      (a superuser URL of a cluster with the extension
#                                          installed by scripts/install-extension.sh)
#
# For each frozen install script sql/install/queen_ack--V.sql:
#   1. CREATE EXTENSION queen_ack VERSION 'V' in a fresh database with V's own library
#      (scripts/build-old-library.sh builds it for the major under test from the commit
#      V was frozen at), then push, pop, ack, nack and dead-letter messages through V's
#      functions, leaving a live lease and unconsumed messages behind;
#   2. snapshot every table (the columns V had), put the current library back,
#      ALTER EXTENSION queen_ack UPDATE;
#   3. (a) every row is still there, column for column; the extension reports the default
#      version; the queue goes on working: pop the rest and ack it, the lease left behind
#      is still honoured;
#   4. (b) the catalog (tests/upgrade/catalog.sql: functions with arguments, results,
#      volatility, SECURITY DEFINER, search_path, bodies; tables, columns, defaults,
#      indexes, constraints, grants) equals a fresh install's; the diff is printed if not.
# Each version runs a library of its own (docs/operations.md, "Upgrading"): V's library
# sits beside the current one, as after installing the new package over V's, and V's
# database keeps serving on it until its update; the current library refuses V's SQL;
# an update in a session that already ran V's library goes on with the new one; after
# the update no function names an older library, and scripts/libraries.sh then finds V's
# library unused and prunes it. Also checks that every C symbol a shipped script names
# exists in the library it names. Prints cargo-style "test upgrade::... ok" lines and a
# "test result:" line.
set -uo pipefail
export PGOPTIONS="-c client_min_messages=warning"
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/upgrade.sh <postgres-url>}
BASE=${URL%/*}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
# The old libraries are built for the major under test (scripts/build-old-library.sh).
PG_MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
WORK=$(mktemp -d /tmp/queen-upgrade.XXXXXX)
passed=0 failed=0
SUITE=upgrade
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
psql_db() { local db=$1; shift; psql "$BASE/$db" -X -qAt -v ON_ERROR_STOP=1 "$@"; }
recreate_db() {
    psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
}

DEFAULT=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/queen_ack.control")

LIBDIR=$("$PG_CONFIG" --pkglibdir)
# A version's library file: 0.1.0's predates the versioned names (its control file's
# module_pathname is $libdir/queen_ack).
lib_of() { [ "$1" = 0.1.0 ] && echo "$LIBDIR/queen_ack.so" || echo "$LIBDIR/queen_ack-$1.so"; }
CURRENT_LIB=$(lib_of "$DEFAULT")
# Where a version keeps its leases (0.1.0: on the cursor row; since 0.2.0 an unlogged table).
leases_of() { [ "$1" = 0.1.0 ] && echo queen.log_consumers || echo queen.log_leases; }
# The symbols a script names for library $2 ('MODULE_PATHNAME' or '<library>', 'sym')
# that the library file $3 does not export.
missing_symbols() { # script library-pattern library-file
    grep -o "'$2', '[a-z0-9_]*'" "$1" | sed "s/.*, '\(.*\)'/\1/" | sort -u |
        comm -23 - <(nm -D --defined-only "$3" 2>/dev/null | awk '{print $3}' | sort -u)
}
EXTDIR=$("$PG_CONFIG" --sharedir)/extension
# --- C symbols: every upgrade script to this version names its library's symbols (the
# released steps between older versions are checked once their library is installed).
missing=$(for step in "$EXTDIR"/queen_ack--*--"$DEFAULT".sql; do
    missing_symbols "$step" "queen_ack-$DEFAULT" "$CURRENT_LIB"
    grep -o "'MODULE_PATHNAME'" "$step" | head -1 # an upgrade step names its library
done)
check c_symbols_of_every_upgrade_step_exist_in_its_library "$missing" ""
# Every frozen release has a generated script straight to this version
# (scripts/upgrade-scripts.py), and nothing else names this version by hand.
check every_frozen_release_has_an_upgrade_script \
    "$(for f in sql/install/queen_ack--*.sql; do v=${f##*--}; v=${v%.sql}
         [ "$v" = "$DEFAULT" ] || [ -f "$EXTDIR/queen_ack--$v--$DEFAULT.sql" ] || echo "$v"; done)" ""

# The workload run at the old version: only functions every frozen version has.
workload() { # db
    psql_db "$1" <<'SQL'
SELECT queen.configure_queue_v1('up.orders', NULL, NULL, '{"retryLimit": 1, "leaseTime": 300}');
SELECT queen.push('up.orders', '[{"n":0},{"n":1},{"n":2},{"n":3},{"n":4},{"n":5},{"n":6},{"n":7},{"n":8},{"n":9}]',
                  ARRAY['t0','t1','t2','t3','t4','t5','t6','t7','t8','t9']);
SELECT queen.push('up.orders', '[{"p":"b"}]', ARRAY['b0'], 'B');
-- pop 3, ack them by transactionId
SELECT queen.ack(r_partition_id, r_lease_id, array_agg(r_transaction_id))
  FROM queen.pop('up.orders', 'Default', p_batch => 3, p_lease_seconds => 300)
 GROUP BY r_partition_id, r_lease_id;
-- pop 2, nack one: one retry of the budget (retryLimit 1) is spent, the batch redelivers
SELECT queen.ack(r_partition_id, r_lease_id, ARRAY['t3','t4'], ARRAY['failed', NULL])
  FROM queen.pop('up.orders', 'Default', p_batch => 2, p_lease_seconds => 300)
 GROUP BY r_partition_id, r_lease_id;
-- redelivered, nacked again: the budget is spent, so the head goes to the DLQ
CREATE TEMP TABLE leased AS
SELECT r_partition_id AS pid, r_lease_id AS lease, array_agg(r_transaction_id) AS txns
  FROM queen.pop('up.orders', 'Default', p_batch => 2, p_lease_seconds => 300)
 GROUP BY 1, 2;
CREATE TEMP TABLE verdict AS
SELECT queen.ack(pid, lease, ARRAY['t3'], ARRAY['failed']) AS r FROM leased;
SELECT queen.log_dlq_head_v1(l.pid, '__QUEUE_MODE__', l.lease, (v.r->>'off')::bigint,
                             NULL, NULL, NULL, 'poison at upgrade time')
  FROM leased l, verdict v WHERE (v.r->>'dlq')::bool;
-- a named group with a subscription record, part way through partition B
SELECT count(*) FROM queen.log_pop_queue_v1('up.orders', 'g1', 5, 60, 'w-g1', true, 'all', '', 2);
-- a live lease left behind across the upgrade
SELECT count(*) FROM queen.pop('up.orders', 'Default', p_batch => 2, p_lease_seconds => 600);
SQL
}

# Per table: the old version's columns of every row, as sorted text.
snapshot() { # db file
    local tables
    tables=$(psql_db "$1" -c "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                               WHERE n.nspname = 'queen' AND c.relkind = 'r' ORDER BY 1")
    : >"$2"
    for t in $tables; do
        local cols
        cols=$(psql_db "$1" -c "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attname)
                                  FROM pg_attribute WHERE attrelid = 'queen.$t'::regclass
                                   AND attnum > 0 AND NOT attisdropped")
        echo "$t $cols" >>"$2.cols"
        psql_db "$1" -c "SELECT '$t', t::text FROM (SELECT $cols FROM queen.$t) t ORDER BY 2" >>"$2"
    done
}

# The same columns after the upgrade. A table whose columns moved has a query in
# tests/upgrade/rows/<version>/<table>.sql that reads them from where they live now; a column the
# upgrade dropped without such a query shows up as an error, i.e. a difference.
snapshot_again() { # db colsfile file version
    : >"$3"
    while read -r t cols; do
        local from="SELECT $cols FROM queen.$t"
        [ -f "tests/upgrade/rows/$4/$t.sql" ] && from=$(grep -v '^--' "tests/upgrade/rows/$4/$t.sql")
        psql_db "$1" -c "SELECT '$t', t::text FROM ($from) t ORDER BY 2" >>"$3" 2>&1
    done <"$2"
}

psql "$URL" -X -qAt -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS queen_fresh" \
    -c "CREATE DATABASE queen_fresh" >/dev/null
psql_db queen_fresh -c "CREATE EXTENSION queen_ack" >/dev/null
psql_db queen_fresh -f tests/upgrade/catalog.sql >"$WORK/fresh.catalog"
[ -s "$WORK/fresh.catalog" ] && ok fresh_install_of_default_version || fail fresh_install_of_default_version

# The old version runs its own code: its library is built from the commit it was frozen
# at and installed beside the current one (this build's library and scripts are what a
# new package installs), as an operator upgrades in production; at the end every old
# library this test installed is pruned again by scripts/libraries.sh.
trap 'rm -rf "$WORK"' EXIT

for script in sql/install/queen_ack--*.sql; do
    v=${script##*--}
    v=${v%.sql}
    tag=from_${v//./_}
    db=queen_up_${v//./_}
    if [ "$v" = "$DEFAULT" ]; then
        continue # the default version itself: covered by the fresh install
    fi
    old_lib=$(bash scripts/build-old-library.sh "$v" "$PG_MAJOR" 2>"$WORK/$db.build.err") || {
        fail "${tag}_old_library_builds" "$(tail -5 "$WORK/$db.build.err")"
        continue
    }
    # Installed as V's package installed it (a new inode: running backends keep theirs).
    cp "$old_lib" "$(lib_of "$v").new" && mv -f "$(lib_of "$v").new" "$(lib_of "$v")"
    # The released step into V (generated from V's frozen install script) names V's library.
    prev_step=$(ls "$EXTDIR"/queen_ack--*--"$v".sql 2>/dev/null)
    check "${tag}_c_symbols_of_the_released_step_into_it_exist_in_its_library" \
        "$(for step in $prev_step; do missing_symbols "$step" "queen_ack-$v" "$(lib_of "$v")"; done)" ""
    check "${tag}_c_symbols_of_its_install_script_exist_in_its_library" \
        "$(missing_symbols "$script" MODULE_PATHNAME "$(lib_of "$v")"; missing_symbols "$script" "queen_ack-$v" "$(lib_of "$v")")" ""
    recreate_db "$db"
    if psql_db "$db" -c "CREATE EXTENSION queen_ack VERSION '$v'" >/dev/null 2>"$WORK/$db.create.err"; then
        ok "${tag}_installs_with_its_own_library"
    else
        fail "${tag}_installs_with_its_own_library" "$(cat "$WORK/$db.create.err")"
        continue
    fi
    # This build's library and scripts are installed (the new package) and V's database
    # serves pushes, pops, acks, nacks and dead letters on V's own library.
    check "${tag}_new_package_is_installed_beside_it" \
        "$([ -f "$CURRENT_LIB" ] && echo library)|$(psql_db "$db" -c "SELECT default_version FROM pg_available_extensions WHERE name = 'queen_ack'")" \
        "library|$DEFAULT"
    if workload "$db" >"$WORK/$db.workload" 2>&1; then ok "${tag}_serves_pushes_and_acks_beside_the_new_library_until_updated"; else
        fail "${tag}_serves_pushes_and_acks_beside_the_new_library_until_updated" "$(tail -3 "$WORK/$db.workload")"
        continue; fi
    check "${tag}_runs_its_own_library" \
        "$(psql_db "$db" -c "SELECT DISTINCT probin FROM pg_proc WHERE pronamespace = 'queen'::regnamespace AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')")" \
        "$([ "$v" = 0.1.0 ] && echo '$libdir/queen_ack' || echo "queen_ack-$v")"
    # The current library, called with V's SQL (its push as the fresh install defines it,
    # under another name), refuses it with 55000 and changes nothing: new code never runs
    # against an older schema. (Its p_tenant default names queen.default_tenant(), which V
    # may not have: the copy defaults to NULL, the refusal comes before any argument.)
    { psql_db queen_fresh -c "SELECT pg_get_functiondef(oid) FROM pg_proc
                               WHERE oid = 'queen.push'::regproc"
      echo ';'; } | sed -e 's/FUNCTION queen\.push(/FUNCTION pg_temp.new_push(/' \
                        -e 's/DEFAULT queen\.default_tenant()/DEFAULT NULL/' >"$WORK/$db.new_push.sql"
    check "${tag}_sql_is_refused_by_the_new_library_until_updated" \
        "$(psql_db "$db" -f "$WORK/$db.new_push.sql" -c "SELECT pg_temp.new_push('x', '[1]')" 2>&1 | grep -o 'run ALTER EXTENSION queen_ack UPDATE')|$(psql_db "$db" -c "SELECT count(*) FROM queen.queues WHERE name = 'x'")" \
        "run ALTER EXTENSION queen_ack UPDATE|0"
    snapshot "$db" "$WORK/$db.before"
    check "${tag}_has_dlq_row_and_live_lease" \
        "$(psql_db "$db" -c "SELECT (SELECT count(*) FROM queen.log_dlq), (SELECT count(*) FROM $(leases_of "$v") WHERE worker_id IS NOT NULL)")" \
        "1|1"
    lease=$(psql_db "$db" -c "SELECT worker_id FROM $(leases_of "$v") WHERE worker_id IS NOT NULL")
    check "${tag}_its_library_is_listed_in_use" \
        "$(bash scripts/libraries.sh "$URL" | grep -c "^$(basename "$(lib_of "$v")") $v used by: .*$db")" "1"
    if psql_db "$db" -c "ALTER EXTENSION queen_ack UPDATE" >"$WORK/$db.update" 2>&1; then
        ok "${tag}_alter_extension_update"
    else
        fail "${tag}_alter_extension_update" "$(cat "$WORK/$db.update")"
        continue
    fi
    check "${tag}_reports_default_version" \
        "$(psql_db "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'")" "$DEFAULT"
    check "${tag}_every_c_function_runs_the_new_library_after_the_update" \
        "$(psql_db "$db" -c "SELECT DISTINCT probin FROM pg_proc WHERE pronamespace = 'queen'::regnamespace AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')")" \
        "queen_ack-$DEFAULT"
    snapshot_again "$db" "$WORK/$db.before.cols" "$WORK/$db.after" "$v"
    if diff -u "$WORK/$db.before" "$WORK/$db.after" >"$WORK/$db.rows.diff"; then
        ok "${tag}_every_row_is_still_there"
    else
        fail "${tag}_every_row_is_still_there"
        head -40 "$WORK/$db.rows.diff"
    fi
    # The lease taken before the upgrade is still honoured: ack it by transactionId.
    check "${tag}_lease_from_before_still_acks" \
        "$(psql_db "$db" -c "SELECT r->>'ok', r->>'acked', r->>'leaseReleased' FROM (
              SELECT queen.ack(c.partition_id, '$lease', ARRAY['t4','t5']) r
                FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
               WHERE p.name = 'Default' AND c.consumer_group = '__QUEUE_MODE__') s")" "true|2|true"
    # The queue goes on working: pop the rest and ack it.
    check "${tag}_pop_and_ack_the_rest" \
        "$(psql_db "$db" -c "SELECT sum((r->>'acked')::int) FROM (
              SELECT queen.ack(r_partition_id, r_lease_id, array_agg(r_transaction_id)) r
                FROM queen.pop('up.orders', 'Default', p_batch => 100, p_lease_seconds => 60)
               GROUP BY r_partition_id, r_lease_id) s")" "4"
    check "${tag}_every_message_accounted_for" \
        "$(psql_db "$db" -c "SELECT c.committed, c.total_consumed, NOT c.leased
              FROM queen.consumer_lag c
             WHERE c.partition = 'Default' AND c.consumer_group = '__QUEUE_MODE__'")" "9|10|t"
    check "${tag}_push_after_upgrade" \
        "$(psql_db "$db" -c "SELECT queen.push('up.orders', '[{\"n\":10}]', ARRAY['t10'])->>'status'")" "queued"
    check "${tag}_dedup_still_sees_old_hashes" \
        "$(psql_db "$db" -c "SELECT queen.push('up.orders', '[{\"n\":0}]', ARRAY['t0'])->>'status'")" "duplicate"
    psql_db "$db" -f tests/upgrade/catalog.sql >"$WORK/$db.catalog"
    if diff -u "$WORK/fresh.catalog" "$WORK/$db.catalog" >"$WORK/$db.catalog.diff"; then
        ok "${tag}_catalog_equals_fresh_install"
    else
        fail "${tag}_catalog_equals_fresh_install" \
            "catalog of $v + ALTER EXTENSION UPDATE differs from a fresh $DEFAULT (- fresh, + upgraded):"
        cat "$WORK/$db.catalog.diff"
    fi
    psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS $db" >/dev/null

    # An update in a session that already runs V's library: the backend loads the new
    # one beside it and goes on (push, pop, ack) in the same session.
    recreate_db "${db}_same"
    check "${tag}_update_in_a_session_that_ran_the_old_library" \
        "$(psql_db "${db}_same" -c "CREATE EXTENSION queen_ack VERSION '$v'" \
            -c "SELECT queen.push('same', '[1]', ARRAY['s0']) IS NOT NULL" \
            -c "ALTER EXTENSION queen_ack UPDATE" \
            -c "SELECT queen.push('same', '[2]', ARRAY['s1'])->>'status'" \
            -c "SELECT sum((r->>'acked')::int) FROM (
                   SELECT queen.ack(r_partition_id, r_lease_id, array_agg(r_transaction_id)) r
                     FROM queen.pop('same', p_batch => 10, p_lease_seconds => 60)
                    GROUP BY r_partition_id, r_lease_id) s" \
            -c "SELECT string_agg(DISTINCT m[1], ',' ORDER BY m[1])
                  FROM regexp_matches(pg_read_file('/proc/self/maps'), '/(queen_ack[^/\n]*)\.so', 'g') m" \
            2>&1 | tr '\n' ' ')" \
        "t queued 2 $(basename "$(lib_of "$v")" .so),queen_ack-$DEFAULT "
    psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS ${db}_same" >/dev/null

    # No database uses V's library any more: scripts/libraries.sh prunes it and keeps
    # the current one.
    check "${tag}_its_library_is_pruned_once_unused" \
        "$(bash scripts/libraries.sh "$URL" --prune | grep -E "^($(basename "$CURRENT_LIB")|$(basename "$(lib_of "$v")")) " | sed 's/ used by:.*/ used/' | sort | tr '\n' ' ')|$([ -e "$(lib_of "$v")" ] && echo kept || echo gone)" \
        "$(printf '%s\n' "$(basename "$CURRENT_LIB") $DEFAULT used" "$(basename "$(lib_of "$v")") $v unused: removed" | sort | tr '\n' ' ')|gone"
done
# The released path, one step at a time, each version on its own library: a database
# created at the oldest release goes through every later release's script in turn
# (ALTER EXTENSION ... UPDATE TO each), serving pushes and acks at each, and ends with
# the fresh install's catalog.
frozen=$(for f in sql/install/queen_ack--*.sql; do v=${f##*--}; echo "${v%.sql}"; done | sort -V)
first=$(echo "$frozen" | head -1)
if [ "$(echo "$frozen" | wc -l)" -ge 2 ]; then
    for v in $frozen; do
        [ "$v" = "$DEFAULT" ] && continue
        lib=$(bash scripts/build-old-library.sh "$v" "$PG_MAJOR" 2>/dev/null) &&
            cp "$lib" "$(lib_of "$v").new" && mv -f "$(lib_of "$v").new" "$(lib_of "$v")"
    done
    recreate_db queen_up_chain
    out=$( { psql_db queen_up_chain -c "CREATE EXTENSION queen_ack VERSION '$first'" &&
             workload queen_up_chain >/dev/null &&
             for v in $(echo "$frozen" | tail -n +2) "$DEFAULT"; do
                 psql_db queen_up_chain -c "ALTER EXTENSION queen_ack UPDATE TO '$v'" \
                     -c "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'" \
                     -c "SELECT queen.push('up.orders', '[{\"at\":\"$v\"}]', ARRAY['at-$v'])->>'status'" || exit 1
             done; } 2>&1 | tr '\n' ' ')
    want=$(for v in $(echo "$frozen" | tail -n +2) "$DEFAULT"; do printf '%s queued ' "$v"; done)
    check "chain_${first//./_}_through_every_release_one_step_at_a_time" "$out" "$want"
    psql_db queen_up_chain -f tests/upgrade/catalog.sql >"$WORK/chain.catalog"
    if diff -u "$WORK/fresh.catalog" "$WORK/chain.catalog" >"$WORK/chain.catalog.diff"; then
        ok chain_catalog_equals_fresh_install
    else
        fail chain_catalog_equals_fresh_install "(- fresh, + upgraded step by step):"
        cat "$WORK/chain.catalog.diff"
    fi
    psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS queen_up_chain" >/dev/null
    bash scripts/libraries.sh "$URL" --prune >/dev/null
fi
psql "$URL" -X -qAt -c "DROP DATABASE IF EXISTS queen_fresh" >/dev/null
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
