# Sourced by the psql suites: fresh databases on one node, or on a Citus cluster when
# QUEEN_TEST_CITUS=1 (scripts/test.sh sets it for the Citus suites): there a database exists on every
# node with Citus and the workers added (tests/citus.sh createdb), and the extension is
# distributed right after CREATE EXTENSION.
testdb_create() { # admin-url name: an empty database, ready for CREATE EXTENSION
    if [ -n "${QUEEN_TEST_CITUS:-}" ]; then
        bash "$(dirname "${BASH_SOURCE[0]}")/citus.sh" createdb "$2"
    else
        psql "$1" -X -qAt -c "DROP DATABASE IF EXISTS $2" -c "CREATE DATABASE $2" >/dev/null
    fi
}
testdb_drop() { # admin-url name
    if [ -n "${QUEEN_TEST_CITUS:-}" ]; then
        bash "$(dirname "${BASH_SOURCE[0]}")/citus.sh" dropdb "$2"
    else
        psql "$1" -X -qAt -c "DROP DATABASE IF EXISTS $2" >/dev/null
    fi
}
# The SQL that installs the extension in a test database (and distributes it on Citus).
testdb_install_sql() {
    if [ -n "${QUEEN_TEST_CITUS:-}" ]; then
        echo "CREATE EXTENSION queen_ack; SELECT FROM queen.distribute()"
    else
        echo "CREATE EXTENSION queen_ack"
    fi
}
# The port of a postgres URL (the clusters' data directories are named after it).
port_of() {
    python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port)' "$1"
}
# A pg_regress-style suite (tests/regress.sh, tests/isolation.sh): every NAME in a fresh
# database SUITE_NAME of the cluster at $URL, after `PREPARE db-url outdir NAME` when one
# is named (it prints its own FAILED line when it fails); one cargo-style line per file and
# the result line; returns 0 when every file passed. Results land in OUTDIR/NAME/.
testdb_suite() { # suite tool inputdir outdir prepare-or-empty name...
    local suite=$1 tool=$2 dir=$3 outdir=$4 prepare=$5 name db out passed=0 failed=0
    shift 5
    if [ ! -x "$tool" ]; then
        echo "$suite: no $(basename "$tool") at $tool (scripts/setup.sh installs postgresql-server-dev-15)"
        echo "test result: FAILED. 0 passed; 1 failed"
        return 1
    fi
    read -r host port user < <(python3 -c 'import sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
print(u.hostname or "127.0.0.1", u.port or 5432, u.username or "postgres")' "$URL")
    for name in "$@"; do
        db=${suite}_$name
        out=$outdir/$name
        rm -rf "$out"
        mkdir -p "$out"
        testdb_create "$URL" "$db"
        if { [ -z "$prepare" ] || "$prepare" "${URL%/*}/$db" "$out" "$name"; } &&
            testdb_regress_one "$suite" "$tool" "$dir" "$out" "$db" "$name"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
        fi
        testdb_drop "$URL" "$db"
    done
    echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
    [ $failed -eq 0 ]
}
# One file of a pg_regress-style suite (pg_regress or pg_isolation_regress, the same
# options and layout) in database $db of the cluster at $host:$port as $user: prints the
# cargo-style line, with the diff against the expected output (or the tool's own
# complaint) under a failure; returns 0 when it passed. Logs to OUT/<tool>.log.
testdb_regress_one() { # suite tool inputdir outdir db name
    local suite=$1 tool=$2 dir=$3 out=$4 db=$5 name=$6 log
    log=$out/$(basename "$tool").log
    if "$tool" --use-existing --bindir="$("$PG_CONFIG" --bindir)" \
        --host="$host" --port="$port" --user="$user" --dbname="$db" \
        --inputdir="$dir" --outputdir="$out" "$name" >"$log" 2>&1; then
        echo "test $suite::$name ... ok"
        return 0
    fi
    echo "test $suite::$name ... FAILED"
    if [ ! -e "$dir/expected/$name.out" ]; then
        echo "no $dir/expected/$name.out: read $out/results/$name.out and, if right, copy it there"
    elif [ -s "$out/regression.diffs" ]; then
        cat "$out/regression.diffs"
    else
        cat "$log"
    fi
    return 1
}
