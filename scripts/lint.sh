#!/usr/bin/env bash
# The habits that keep the code as it is: rustfmt and clippy (every target, warnings are
# errors) over the whole workspace; then clippy of the extension for every other
# PostgreSQL major the pgrx home names (pg17, pg18 lines of $PGRX_HOME/config.toml, which
# scripts/test.sh writes), since its code is compiled per major. Prints cargo-style lines
# and a "test result:" line.
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0 failed=0
run() { # name, command...
    local name=$1; shift
    if "$@" >"/tmp/qa-lint-$name.log" 2>&1; then
        passed=$((passed + 1)); echo "test lint::$name ... ok"
    else
        failed=$((failed + 1)); echo "test lint::$name ... FAILED"; tail -40 "/tmp/qa-lint-$name.log"
    fi
}
run rustfmt cargo fmt --all --check
run clippy cargo clippy --workspace --all-targets -- -D warnings
for major in $(sed -n 's/^pg\([0-9][0-9]*\) = .*/\1/p' "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null); do
    [ "$major" = 15 ] && continue # the default feature: the workspace run above
    run "clippy_pg$major" cargo clippy -p queen_ack --no-default-features --features "pg$major" \
        --all-targets -- -D warnings
done
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
