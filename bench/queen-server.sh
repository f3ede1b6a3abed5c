#!/usr/bin/env bash
# Builds Queen MQ's own C++ server (uWebSockets + libpq) from the vendored tarball in
# ../shared/vendor into target/queen-server/, per the BUILD.md inside it (about 16 minutes
# on 2 cores), for the "versus Queen's server" section of queen-bench. Idempotent: with
# the binary present it does nothing. Never run by the test command.
#   bench/queen-server.sh          -> prints the binary's path on stdout
# Exit 3 (one skip line on stderr) when ../shared/vendor holds no Queen tarball.
set -euo pipefail
cd "$(dirname "$0")/.."
# ../shared/vendor beside the main checkout (a git worktree elsewhere finds it there too).
MAIN=$(cd "$(git rev-parse --path-format=absolute --git-common-dir)/.." && pwd)
VENDOR=${QUEEN_SERVER_VENDOR:-$MAIN/../shared/vendor}
REV=ab23212
DIR=$PWD/target/queen-server/queen-server-$REV
BIN=$DIR/server/bin/queen-server
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
TARBALL=$VENDOR/queen-server-$REV.tar.gz
if [ ! -f "$TARBALL" ]; then
    echo "queen-server: skipped, $TARBALL is absent" >&2
    exit 3
fi
command -v cmake >/dev/null || {
    echo "queen-server: installing cmake (Debian package)" >&2
    apt-get install -y -q cmake >/dev/null
}
mkdir -p target/queen-server
[ -d "$DIR/server" ] || tar xzf "$TARBALL" -C target/queen-server
cd "$DIR"
(cd server/vendor/libuv && mkdir -p build && cd build &&
    cmake .. -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DLIBUV_BUILD_SHARED=OFF >/dev/null &&
    nice cmake --build . --target uv_a -j2 >/dev/null)
touch server/vendor/.deps_ready
(cd server && nice make -j2 build-only) >&2
[ -x "$BIN" ] || { echo "queen-server: build finished without $BIN" >&2; exit 1; }
echo "$BIN"
