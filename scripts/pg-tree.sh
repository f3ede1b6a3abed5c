#!/usr/bin/env bash
# The PostgreSQL the tests use: a private copy of the system's PostgreSQL MAJOR under
# target/pg/MAJOR, so that installing test builds (cargo pgrx test, the test clusters'
# installs, old libraries of the upgrade test) never touches an installation the tests
# did not make: a database run by scripts/run.sh, or someone else's server, keeps its
# library while the test command runs (docs/operations.md, "Running the tests beside a
# database").
#
#   scripts/pg-tree.sh [MAJOR]   -> prints the private tree's pg_config (default 15)
#
# Debian's PostgreSQL is relocatable: its binaries find their share and lib directories
# relative to their own location, so copying bin/, lib/, share/ and the headers under one
# new root gives a working server and a pg_config that names the copy. The copy is made
# again when the system's packages change (a minor upgrade, pg_cron or PgQ installed):
# the stamp records their versions. The extension's own files are not copied.
set -euo pipefail
cd "$(dirname "$0")/.."
MAJOR=${1:-15}
SYS_PG_CONFIG=/usr/lib/postgresql/$MAJOR/bin/pg_config
[ -x "$SYS_PG_CONFIG" ] || { echo "pg-tree.sh: no PostgreSQL $MAJOR at $SYS_PG_CONFIG" >&2; exit 1; }
ROOT=$PWD/target/pg/$MAJOR
STAMP=$ROOT/.stamp
want=$({ "$SYS_PG_CONFIG" --version
         dpkg-query -W -f='${Package} ${Version}\n' "postgresql-$MAJOR*" "postgresql-server-dev-$MAJOR" 2>/dev/null
       } | sort)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    echo "pg-tree.sh: copying the system's PostgreSQL $MAJOR to $ROOT" >&2
    rm -rf "$ROOT"
    mkdir -p "$ROOT/usr/lib/postgresql" "$ROOT/usr/share/postgresql" "$ROOT/usr/include"
    cp -a "/usr/lib/postgresql/$MAJOR" "$ROOT/usr/lib/postgresql/"
    cp -a "/usr/share/postgresql/$MAJOR" "$ROOT/usr/share/postgresql/"
    cp -a /usr/include/postgresql "$ROOT/usr/include/"
    rm -f "$ROOT/usr/lib/postgresql/$MAJOR/lib/queen_ack"*.so \
        "$ROOT/usr/share/postgresql/$MAJOR/extension/queen_ack"*
    # The server runs as postgres; it only reads these files.
    chmod -R a+rX "$ROOT"
    echo "$want" >"$STAMP"
fi
echo "$ROOT/usr/lib/postgresql/$MAJOR/bin/pg_config"
