#!/usr/bin/env bash
# The statistics counters that moved between PostgreSQL majors (tests/pg_stats.tsv):
#   . tests/pg_stats.sh; pg_stats_expr NAME VERSION_NUM    the SQL expression for a server
#                                                          (VERSION_NUM: server_version_num)
#   tests/pg_stats.sh <postgres-url>                       checks every row on that server
# What the check proves, per counter: the row chosen for this server's version returns a
# number, and each of the counter's other rows returns none on it (the view or column it
# reads is not there yet, or no longer), so every row is what some major needs. Prints
# cargo-style lines and a "test result:" line.
PG_STATS_TSV=$(dirname "${BASH_SOURCE[0]}")/pg_stats.tsv

pg_stats_expr() { # name version_num
    awk -F'\t' -v n="$1" -v v="$2" '!/^#/ && $1 == n && $2 <= v + 0 && $2 + 0 >= best {best = $2 + 0; e = $3}
        END {if (e == "") exit 1; print e}' "$PG_STATS_TSV"
}

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

set -uo pipefail
URL=${1:?usage: tests/pg_stats.sh <postgres-url>}
export PGOPTIONS="-c client_min_messages=warning"
q() { psql "$URL" -X -qAt -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
version=$(q "SHOW server_version_num") || { echo "pg_stats: cannot connect: $version"; exit 1; }
passed=0 failed=0
SUITE=pg_stats
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

number() { local got; got=$(q "SELECT $1") && [[ $got =~ ^[0-9]+$ ]]; }
for name in $(awk -F'\t' '!/^#/ {print $1}' "$PG_STATS_TSV" | sort -u); do
    chosen=$(pg_stats_expr "$name" "$version")
    since=$(awk -F'\t' -v n="$name" -v e="$chosen" '$1 == n && $3 == e {print $2}' "$PG_STATS_TSV")
    if number "$chosen"; then
        ok "${name}_on_${version}_reads_the_row_since_${since}"
    else
        fail "${name}_on_${version}_reads_the_row_since_${since}" "SELECT $chosen: $(q "SELECT $chosen")"
    fi
    while IFS=$'\t' read -r n s expr; do
        [ "$n" = "$name" ] && [ "$s" != "$since" ] || continue
        if number "$expr"; then
            fail "${name}_row_since_${s}_counts_nothing_on_${version}" "it counts here: which row is right?"
        else
            ok "${name}_row_since_${s}_counts_nothing_on_${version}"
        fi
    done < <(grep -v '^#' "$PG_STATS_TSV")
done
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
