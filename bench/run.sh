#!/usr/bin/env bash
# bench/run.sh (make gpu-check): everything only a GPU can show, in one call on the
# device machine. Builds there, runs the checks, writes logs under $OUT and prints a
# short table last. Figures go to bench/RESULTS.md by hand, with date and command.
#
# The build needs libinih and uthash headers; where the machine lacks them, the
# caller carries them in .devdeps/ (see bench/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
declare -a ROWS=()
row() { ROWS+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -1
    ldd --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

MAKEFLAGS_EXTRA=()
if [ ! -f /usr/include/ini.h ] && [ -d .devdeps ]; then
    MAKEFLAGS_EXTRA=(INIH_LIB="$PWD/.devdeps/libinih.a" CFLAGS="-O2 -g -I$PWD/.devdeps/include")
fi
if make -j"$(nproc)" "${MAKEFLAGS_EXTRA[@]}" build/libflextensor.so build/bin/ft-run build/bin/ft-trace \
        build/examples/model-sim gpu-example >"$OUT/build.log" 2>&1; then
    row "build (shim, tools, simulator, model-gpu)" "ok" ""
else
    row "build" "FAIL" "see build.log"
    tail -30 "$OUT/build.log"
    printf '%s\n' "${ROWS[@]}"
    exit 1
fi

# --- the example model: same checksum on the simulator, on the GPU, and under the shim
ARGS=(--layers 16 --dim 2048 --iters 3)
checksum() { grep '^checksum' "$1" | awk '{print $2}'; }
LD_LIBRARY_PATH=build/sim build/examples/model-sim "${ARGS[@]}" >"$OUT/model-sim.txt" 2>&1
t0=$(date +%s.%N)
build/examples/model-gpu "${ARGS[@]}" >"$OUT/model-gpu.txt" 2>&1
t1=$(date +%s.%N)
FT_ENABLED=1 FT_LOG_LEVEL=info FT_TRACE_FILE="$OUT/model-trace.bin" LD_PRELOAD=$PWD/build/libflextensor.so \
    build/examples/model-gpu "${ARGS[@]}" >"$OUT/model-gpu-shim.txt" 2>&1
t2=$(date +%s.%N)
FT_ENABLED=0 LD_PRELOAD=$PWD/build/libflextensor.so \
    build/examples/model-gpu "${ARGS[@]}" >"$OUT/model-gpu-off.txt" 2>&1
build/bin/ft-trace "$OUT/model-trace.bin" >"$OUT/model-trace.txt" 2>&1
sim=$(checksum "$OUT/model-sim.txt"); gpu=$(checksum "$OUT/model-gpu.txt")
on=$(checksum "$OUT/model-gpu-shim.txt"); off=$(checksum "$OUT/model-gpu-off.txt")
[ -n "$sim" ] && [ "$sim" = "$gpu" ] && r=ok || r=FAIL
row "example model: simulator = GPU" "$r" "sim $sim gpu $gpu"
[ -n "$gpu" ] && [ "$gpu" = "$on" ] && [ "$gpu" = "$off" ] && r=ok || r=FAIL
row "example model: GPU under shim (on, off)" "$r" "on $on off $off"
row "example model wall time (s)" "info" "$(awk -v a=$t0 -v b=$t1 -v c=$t2 'BEGIN{printf "%.2f plain, %.2f shim", b-a, c-b}')"

echo
echo "== FlexTensor GPU checks ($(head -1 "$OUT/env.txt"))"
printf '%-44s %-8s %s\n' "check" "result" "detail"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/summary.txt"
! grep -q FAIL "$OUT/summary.txt"
