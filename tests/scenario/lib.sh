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
# noleaks CMD...: CMD is a program the project did not write (python3): under a
# sanitizer build, its own leaks at exit are not the shim's.
noleaks() (
    [ -z "${SAN_PRELOAD:-}" ] || export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    "$@"
)
# ftrun FT_RUN [ARGS...]: run an ft-run; under a sanitizer build the runtime is in
# LD_PRELOAD already, and ft-run keeps it ahead of the shim.
ftrun() { env ${SAN_PRELOAD:+LD_PRELOAD="$SAN_PRELOAD"} "$@"; }
