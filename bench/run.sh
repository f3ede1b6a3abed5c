#!/usr/bin/env bash
# Runs the benchmark harness (crates/queen_bench) against a dedicated PostgreSQL 15 cluster:
# installs the extension (release build; QUEEN_TEST_SKIP_INSTALL=1 reuses the installed
# one), builds the release broker and the bench, starts the cluster with tests/cluster.sh
# on port 5490, runs `queen-bench`, and stops the cluster again, also on failure or ctrl-c.
#   bench/run.sh [--quick] [--out DIR] [--sections 1,2,3,4]
set -euo pipefail
cd "$(dirname "$0")/.."
export QUEEN_TEST_PG_PORT=${QUEEN_TEST_PG_PORT:-5490}
QUEEN_TEST_SKIP_INSTALL=${QUEEN_TEST_SKIP_INSTALL:-0}
if [ "$QUEEN_TEST_SKIP_INSTALL" != 1 ]; then
    # tests/cluster.sh would install a debug build; a benchmark wants the release one.
    bash scripts/install-extension.sh --release
fi
cargo build --release -p queen_broker -p queen_bench
trap 'bash tests/cluster.sh stop' EXIT
URL=$(QUEEN_TEST_SKIP_INSTALL=1 bash tests/cluster.sh start)
echo "bench cluster: $URL" >&2
./target/release/queen-bench --database-url "$URL" "$@"
