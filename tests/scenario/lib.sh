# lib.sh - shared by the scenario scripts (sourced, not run).
set -euo pipefail
BUILD=${BUILD:-build}
BUILD=$(cd "$BUILD" && pwd)
SIMLIB=$BUILD/sim
SHIM=$BUILD/libflextensor.so
MODEL=$BUILD/examples/model-sim
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
NAME=$(basename "$0" .sh)
# FT_SPILL is on by default; the scripts that are not about holding the budget before
# the plan run without it (spill.sh, and the random cases that draw it, set it).
export FT_SPILL=${FT_SPILL:-0}

fail() { echo "FAIL [$NAME]: $*" >&2; exit 1; }
pass() { echo "  ok   $*"; }

# expect_grep PATTERN FILE WHAT: FILE must contain PATTERN (extended regex).
expect_grep() { grep -Eq -- "$1" "$2" || { sed 's/^/    | /' "$2" >&2; fail "$3: no /$1/ in output"; }; }
expect_no_grep() { ! grep -Eq -- "$1" "$2" || { sed 's/^/    | /' "$2" >&2; fail "$3: unexpected /$1/"; }; }

# sim CMD...: run CMD on the simulated device, without the shim.
sim() { env LD_LIBRARY_PATH="$SIMLIB" "$@"; }
# shim CMD...: run CMD on the simulated device with the shim preloaded (FT_* from env).
# A sanitizer build (make check SAN=...) loads its runtime ahead of the shim.
PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD }$SHIM"
shim() { env LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$@"; }
# compare_run NAME ARGS -- ENV...: the model ($MODEL) with the caller's ${L[@]} and ARGS,
# without the shim and then under it with FT_ENABLED=1 and ENV; the outputs must be
# equal and the shim's stderr ($WORK/NAME.err) must hold one verdict line.
compare_run() {
    local name=$1 args=()
    shift
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    sim "$MODEL" "${L[@]}" "${args[@]}" >"$WORK/$name.plain" || fail "$name: model without shim failed"
    env FT_ENABLED=1 "$@" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${L[@]}" "${args[@]}" \
        >"$WORK/$name.shim" 2>"$WORK/$name.err" \
        || { grep -v 'miss on' "$WORK/$name.err" | sed 's/^/    | /' >&2; fail "$name: model under the shim failed"; }
    cmp -s "$WORK/$name.plain" "$WORK/$name.shim" || fail "$name: output differs from the run without the shim"
    [ "$(grep -c '^flextensor: verdict: ' "$WORK/$name.err")" = 1 ] || fail "$name: not one verdict line"
}
# noleaks CMD...: CMD is a program the project did not write (python3): under a
# sanitizer build, its own leaks at exit are not the shim's.
noleaks() (
    [ -z "${SAN_PRELOAD:-}" ] || export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    "$@"
)
# ftrun FT_RUN [ARGS...]: run an ft-run; under a sanitizer build the runtime is in
# LD_PRELOAD already, and ft-run keeps it ahead of the shim.
ftrun() { env ${SAN_PRELOAD:+LD_PRELOAD="$SAN_PRELOAD"} "$@"; }
