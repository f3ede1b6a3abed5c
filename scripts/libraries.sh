#!/usr/bin/env bash
# The queen_ack libraries installed in a PostgreSQL, and which databases of its running
# cluster use each (docs/operations.md, "Upgrading"). Every version runs a library of its
# own (queen_ack-VERSION.so; 0.1.0's is queen_ack.so), and a package never removes an
# older one: a database keeps running its version's library until ALTER EXTENSION
# queen_ack UPDATE. A library no database uses any more can go; this says which, and
# --prune removes them (never the default version's: CREATE EXTENSION needs it).
#
#   scripts/libraries.sh URL            one line per library: file, version, databases
#   scripts/libraries.sh URL --prune    and remove those no database uses
#
# URL: a superuser of the cluster (every database with the extension is read), as
# postgresql://user@host:port/dbname; PG_CONFIG names the installation (its pkglibdir).
# Run it on the server's host, on every node of a Citus cluster. Exit 1 when a database
# uses a library that is not installed.
set -euo pipefail
URL=${1:?usage: scripts/libraries.sh URL [--prune]}
PRUNE=${2:-}
[ -z "$PRUNE" ] || [ "$PRUNE" = --prune ] || { echo "usage: scripts/libraries.sh URL [--prune]" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
LIBDIR=$("$PG_CONFIG" --pkglibdir)
DEFAULT=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/queen_ack.control")
BASE=${URL%/*}
psql_at() { psql "$1" -X -qAt -v ON_ERROR_STOP=1 -c "$2"; }

# The library file of a version, and the version of a library file.
file_of() { [ "$1" = 0.1.0 ] && echo queen_ack.so || echo "queen_ack-$1.so"; }
version_of() { case $1 in queen_ack.so) echo 0.1.0 ;; *) local v=${1#queen_ack-}; echo "${v%.so}" ;; esac; }

# What each database's C functions load (probin, $libdir/ and .so stripped).
declare -A USERS=()
for db in $(psql_at "$URL" "SELECT datname FROM pg_database WHERE datallowconn ORDER BY 1"); do
    libs=$(psql_at "$BASE/$db" "SELECT DISTINCT regexp_replace(regexp_replace(p.probin, '^\\\$libdir/', ''), '\\.so\$', '')
                                  FROM pg_proc p
                                  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                                  AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                                  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'queen_ack'
                                 WHERE p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')")
    for lib in $libs; do USERS[$lib.so]="${USERS[$lib.so]:-}$db "; done
done

status=0
declare -A SEEN=()
for f in "$LIBDIR"/queen_ack.so "$LIBDIR"/queen_ack-*.so; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    SEEN[$name]=1
    v=$(version_of "$name")
    users=${USERS[$name]:-}
    if [ -n "$users" ]; then
        echo "$name $v used by: ${users% }"
    elif [ "$v" = "$DEFAULT" ]; then
        echo "$name $v unused (kept: the default version's, for CREATE EXTENSION)"
    elif [ -n "$PRUNE" ]; then
        rm -f "$f"
        echo "$name $v unused: removed"
    else
        echo "$name $v unused (--prune removes it)"
    fi
done
for name in "${!USERS[@]}"; do
    [ -n "${SEEN[$name]:-}" ] && continue
    echo "$name $(version_of "$name") MISSING, used by: ${USERS[$name]% }"
    status=1
done
[ -e "$LIBDIR/$(file_of "$DEFAULT")" ] || echo "note: the default version's library $(file_of "$DEFAULT") is not installed"
exit $status
