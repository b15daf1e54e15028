#!/usr/bin/env bash
# setup-deps.sh - the set-up `make` runs before it builds anything: the CUDA Toolkit's
# headers and the Debian packages that the build and the tests need.
#
#   CUDA_HOME=/usr/local/cuda bash tools/setup-deps.sh [--check]
#
# It runs on every make, so it is cheap when nothing is missing: a few file tests and
# one dpkg-query (no stamp file to go stale). A missing package is installed with
# apt-get as root, or through sudo -n where that needs no password. Otherwise, and for
# a missing CUDA Toolkit (never installed here: the user picks the version), it fails
# with one line on stdout saying what to do, which the Makefile makes its error;
# everything else (apt-get's progress) goes to stderr. --check (make -n) installs
# nothing. Without dpkg-query (not Debian) it checks the toolkit only.
set -uo pipefail
exec 3>&1 1>&2
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
install=1
[ "${1:-}" = --check ] && install=0

# fail MESSAGE: the one line, then exit 1.
fail() {
    echo "flextensor: $*" >&3
    exit 1
}

# The CUDA Toolkit: its headers only (no GPU, no driver, no nvcc).
[ -f "$CUDA_HOME/include/cuda.h" ] ||
    fail "no CUDA Toolkit at $CUDA_HOME (cuda.h not found): install it or set CUDA_HOME=/path/to/cuda"
[ -f "$CUDA_HOME/include/cupti.h" ] || [ -f "$CUDA_HOME/extras/CUPTI/include/cupti.h" ] ||
    fail "the CUDA Toolkit at $CUDA_HOME has no CUPTI (cupti.h not found): install its CUPTI component or set CUDA_HOME=/path/to/cuda"
[ -f "$CUDA_HOME/include/nvtx3/nvToolsExt.h" ] ||
    fail "the CUDA Toolkit at $CUDA_HOME has no NVTX 3 (nvtx3/nvToolsExt.h not found): install its NVTX component or set CUDA_HOME=/path/to/cuda"

# The packages, and what needs them.
packages=(
    build-essential # gcc, make, the C library's headers; binutils' nm and readelf (tests/scenario/exports.sh)
    pkg-config      # the Makefile asks it for check's link flags
    uthash-dev      # uthash.h: core/, tests/sim/
    libinih-dev     # ini.h and libinih.a: config/
    check           # check.h: tests/check_*.c
    python3         # tests/scenario/*.sh read ft-trace --json with it
)
# Not chromium: only tests/scenario/timeline_render.sh uses it, and skips without it
# (.ci/run installs it); building the library must not need a browser.
# A package whose command is on PATH counts as there (pkgconf provides pkg-config).
declare -A provides=([pkg-config]=pkg-config [python3]=python3)

command -v dpkg-query >/dev/null || exit 0
declare -A installed=()
while read -r status name; do
    [ "$status" = ii ] && installed[$name]=1
done < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${packages[@]}" 2>/dev/null)
missing=()
for p in "${packages[@]}"; do
    [ -n "${installed[$p]:-}" ] && continue
    [ -n "${provides[$p]:-}" ] && command -v "${provides[$p]}" >/dev/null && continue
    missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=sudo
if [ "$(id -u)" = 0 ]; then
    as_root=() sudo=
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    as_root=(none)
fi
if [ $install = 0 ] || [ "${as_root[*]}" = none ] || ! command -v apt-get >/dev/null; then
    fail "missing Debian packages: run '${sudo:+sudo }apt-get install -y ${missing[*]}'"
fi
echo "flextensor: installing ${missing[*]} (the build and the tests need them)"
# The package lists of a fresh machine are empty or stale: update before installing.
# The lock timeout waits for another apt-get (a second make, unattended upgrades).
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
"${apt[@]}" update -q && "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}" ||
    fail "'apt-get install -y ${missing[*]}' failed (its messages are above)"
