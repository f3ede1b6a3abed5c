#!/usr/bin/env bash
# Build the library of a released version from the commit it was frozen at
# (sql/install/queen_ack--V.commit), for the upgrade test: a database created at V runs
# V's own code before it is upgraded, exactly as in production. Prints the library path.
# One library per PostgreSQL major (a library is built against one major's headers),
# cached in target/old-libs/pgMAJOR/ (one build per machine and major); its own target
# dir, so the current build's artifacts are never touched.
#   scripts/build-old-library.sh VERSION [MAJOR]      (MAJOR: 15 by default)
# The build uses the pgrx home of the caller (PGRX_HOME, whose config.toml names the
# pg_config of pgMAJOR: scripts/test.sh writes it).
set -euo pipefail
cd "$(dirname "$0")/.."
V=${1:?usage: scripts/build-old-library.sh VERSION [MAJOR]}
MAJOR=${2:-15}
commit=$(cat "sql/install/queen_ack--$V.commit")
out=$PWD/target/old-libs/pg$MAJOR/queen_ack-$V.so
# (before libraries were kept per major, 15's lived in target/old-libs/ itself)
legacy=$PWD/target/old-libs/queen_ack-$V.so
if [ "$MAJOR" = 15 ] && [ ! -f "$out" ] && [ -f "$legacy" ]; then
    mkdir -p "$(dirname "$out")" && mv "$legacy" "$out"
fi
if [ -f "$out" ]; then echo "$out"; exit 0; fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "build-old-library: commit $commit of $V is not in this clone (a shallow clone?);" \
         "the upgrade test needs the history: git fetch --unshallow" >&2
    exit 1
fi
src=$PWD/target/old-src/$V-pg$MAJOR
rm -rf "$src"
git worktree prune
git worktree add --detach "$src" "$commit" >/dev/null 2>&1
# A release made before this build knew of a major has no pgMAJOR feature: add the
# same wiring the current Cargo.toml has (pgrx 0.18.1 supports 13-18); the code is V's.
if ! grep -q "^pg$MAJOR = " "$src/Cargo.toml"; then
    sed -i "s|^pg_test = \[\]|pg$MAJOR = [\"pgrx/pg$MAJOR\", \"pgrx-tests/pg$MAJOR\"]\npg_test = []|" "$src/Cargo.toml"
    grep -q "^pg$MAJOR = " "$src/Cargo.toml" ||
        { echo "build-old-library: could not add feature pg$MAJOR to $V's Cargo.toml" >&2; exit 1; }
fi
(cd "$src" && CARGO_TARGET_DIR=$PWD/../../old-build nice -n 10 cargo build --lib -q \
    --no-default-features --features "pg$MAJOR" >&2)
mkdir -p "$(dirname "$out")"
cp "$PWD/target/old-build/debug/libqueen_ack.so" "$out"
git worktree remove --force "$src"
echo "$out"
