#!/usr/bin/env bash
# Build an installable package of queen_ack for a PostgreSQL 15 that is not ours: a
# directory tree mirroring that server's install paths (from its pg_config), plus a
# tarball of it. Copy the tree over / (or untar it there) on the target server, then
# CREATE EXTENSION queen_ack as a superuser. Prints every file the package installs.
#
#   PG_CONFIG=/path/to/their/pg_config scripts/package.sh [OUT_DIR]
#
# Only needs the server's pg_config and headers (Debian: postgresql-server-dev-15) on the
# build machine; the target needs nothing else (the library links only libc and libgcc).
set -euo pipefail
cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
OUT=${1:-$PWD/target/package}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

rm -rf "$OUT"
cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$OUT" >/dev/null
# pgrx packages the built version's script and the upgrade scripts; add the frozen
# install scripts of earlier releases, so that every released version can be created.
extdir=$OUT$("$PG_CONFIG" --sharedir)/extension
for frozen in sql/install/queen_ack--*.sql; do
    [ -e "$frozen" ] || continue
    [ "$(basename "$frozen")" = "queen_ack--$version.sql" ] && continue
    install -m 644 "$frozen" "$extdir/"
done
tar -C "$OUT" -czf "$OUT/../queen_ack-$version-pg15.tar.gz" .
echo "package: $OUT (and target/queen_ack-$version-pg15.tar.gz); it installs:"
(cd "$OUT" && find . -type f | sed 's|^\.||' | sort)
