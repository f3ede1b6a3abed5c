#!/usr/bin/env bash
# Build the library of a released version from the commit it was frozen at
# (sql/install/queen_ack--V.commit), for the upgrade test: a database created at V runs
# V's own code before it is upgraded, exactly as in production. Prints the library path.
# Cached in target/old-libs/ (one build per machine); its own target dir, so the current
# build's artifacts are never touched.
#   scripts/build-old-library.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
V=${1:?usage: scripts/build-old-library.sh VERSION}
commit=$(cat "sql/install/queen_ack--$V.commit")
out=$PWD/target/old-libs/queen_ack-$V.so
if [ -f "$out" ]; then echo "$out"; exit 0; fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "build-old-library: commit $commit of $V is not in this clone (a shallow clone?);" \
         "the upgrade test needs the history: git fetch --unshallow" >&2
    exit 1
fi
src=$PWD/target/old-src/$V
rm -rf "$src"
git worktree prune
git worktree add --detach "$src" "$commit" >/dev/null 2>&1
(cd "$src" && CARGO_TARGET_DIR=$PWD/../../old-build cargo build --lib -q >&2)
mkdir -p "$(dirname "$out")"
cp "$PWD/target/old-build/debug/libqueen_ack.so" "$out"
git worktree remove --force "$src"
echo "$out"
