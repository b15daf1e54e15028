#!/usr/bin/env bash
# run.sh - what `make check` runs once everything is built: the unit suites, the
# simulator suites, then each scenario script named, in that order. A failure does not
# stop the rest: every step runs, the failed ones are named together at the end, and
# the exit status is 1 when any failed.
#
#   BUILD=build bash tests/run.sh tests/scenario/a.sh tests/scenario/b.sh ...
set -u
BUILD=${BUILD:-build}
failed=()
steps=0

# step NAME CMD...: runs CMD under the heading "== NAME"; a failure is noted, not fatal.
step() {
    local name=$1
    shift
    echo "== $name"
    steps=$((steps + 1))
    "$@" || failed+=("$name")
}

step "unit suites" "$BUILD/tests/check_unit"
step "simulator suites" env LD_LIBRARY_PATH="$BUILD/sim" "$BUILD/tests/check_sim"
for s in "$@"; do
    step "scenario $s" env BUILD="$BUILD" bash "$s"
done

if [ ${#failed[@]} -eq 0 ]; then
    echo "make check: all passed ($steps)"
    exit 0
fi
{
    echo "make check: ${#failed[@]} of $steps failed:"
    printf '  %s\n' "${failed[@]}"
} >&2
exit 1
