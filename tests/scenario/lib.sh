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
# san_skip_ft_run WHAT: under a sanitizer build, says that WHAT is skipped, and why, and
# succeeds. ft-run puts the shim ahead of the sanitizer's runtime in LD_PRELOAD, and the
# shim's dlsym resolves RTLD_NEXT from itself: the runtime, looking up the functions it
# intercepts, is handed its own interceptors and spins in its start-up.
san_skip_ft_run() {
    [ -n "${SAN_PRELOAD:-}" ] || return 1
    echo "  skip $1: a program started by ft-run hangs under a sanitizer (the shim's dlsym resolves RTLD_NEXT from itself)"
}
