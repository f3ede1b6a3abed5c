#!/usr/bin/env bash
# Into an extension directory, the scripts of queen_ack that pgrx does not know: the
# frozen install scripts of earlier releases sql/install/queen_ack--V.sql with their
# control files (copied), and the upgrade scripts queen_ack--V--VERSION.sql (generated
# by scripts/upgrade-scripts.py; none is written by hand, docs/operations.md,
# "Upgrading"). The version being built is installed from its generated script, never a
# copy. Shared by scripts/install-extension.sh and scripts/package.sh.
#
#   scripts/release-scripts.sh EXTDIR VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
extdir=$1
version=$2
for frozen in sql/install/queen_ack--*.sql sql/install/queen_ack--*.control; do
    [ -e "$frozen" ] || continue
    [ "$(basename "$frozen" .sql)" = "queen_ack--$version" ] && continue
    [ "$(basename "$frozen" .control)" = "queen_ack--$version" ] && continue
    install -m 644 "$frozen" "$extdir/"
done
python3 scripts/upgrade-scripts.py "$extdir" "$version" >/dev/null
