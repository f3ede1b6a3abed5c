# Sourced by the shell suites after they set SUITE: the cargo-style lines every suite
# prints (`test SUITE::NAME ... ok` / `... FAILED: why`), counted for their closing
# `test result:` line, which scripts/test.sh adds up.
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "test $SUITE::$1 ... ok"; }
fail() { failed=$((failed + 1)); echo "test $SUITE::$1 ... FAILED${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "expected [$3] got [$2]"; fi; }
