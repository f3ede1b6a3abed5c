#!/usr/bin/env bash
# Table bytes over time under a steady load with retention, with the broker's maintenance
# loop on and off, and push / ack latencies beside it (docs/benchmarks.md). The same run twice
# (tests/reliability/plateau.py), then a chart and a Markdown section in the results
# folder (results/bench/lifecycle.md, lifecycle_bytes_over_time.svg).
# On a dedicated cluster (port 5490, stopped after), the release broker.
#   bench/lifecycle.sh [--seconds 600] [--retention 60] [--rate 200] [--interval-ms 10000] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=600 RETENTION=60 RATE=200 INTERVAL=10000 OUT=results/bench
while [ $# -gt 0 ]; do
    case $1 in
        --seconds) SECONDS_EACH=$2; shift 2 ;;
        --retention) RETENTION=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --interval-ms) INTERVAL=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
export QUEEN_TEST_PG_PORT=${QUEEN_TEST_PG_PORT:-5490}
[ "${QUEEN_TEST_SKIP_INSTALL:-0}" = 1 ] || bash scripts/install-extension.sh --release
cargo build --release -p queen_broker
trap 'bash tests/cluster.sh stop' EXIT
WORK=$(mktemp -d /tmp/queen-lifecycle.XXXXXX)
export QUEEN_BROKER_BIN=$PWD/target/release/queen-broker RELIABILITY_WORKDIR=$WORK PYTHONUNBUFFERED=1
run() { # label interval
    # A fresh cluster for each run: a run after another would reuse the free space the
    # first one's tables left, and its growth would read low.
    QUEEN_DATABASE_URL=$(QUEEN_TEST_SKIP_INSTALL=1 bash tests/cluster.sh start) \
        python3 tests/reliability/plateau.py run --seconds "$SECONDS_EACH" --retention "$RETENTION" \
        --rate "$RATE" --maintenance-ms "$2" --json "$WORK/$1.json"
}
run on "$INTERVAL"
run off 0
QUEEN_DATABASE_URL=postgres://unused python3 tests/reliability/plateau.py report --out "$OUT" "$WORK/on.json" "$WORK/off.json"
echo "lifecycle: $OUT/lifecycle.md (runs and broker logs in $WORK)" >&2
