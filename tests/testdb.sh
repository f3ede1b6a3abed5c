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
