#!/usr/bin/env bash
# bench/llama_residency.sh: the residency engine on a transformers Llama (random bf16
# weights, bench/llama_forward.py) under a budget of about a third of its weights:
# the logits of every forward (offloaded ones included) against a run without the
# shim, and the engine's exit report (loads, misses, copies back, measured step).
#
#   OUT=dir LAYERS=16 BUDGET=2560MiB ITERS=12 bash bench/llama_residency.sh
#
# Builds the shim first (with .devdeps/ where the machine lacks libinih, as run.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
LAYERS=${LAYERS:-16}
BUDGET=${BUDGET:-2560MiB}
ITERS=${ITERS:-12}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
MK=()
if [ ! -f /usr/include/ini.h ] && [ -d .devdeps ]; then
    # SETUP=0: the GPU machine has no package archive to install from (.devdeps/ stands in)
    MK=(SETUP=0 INIH_LIB="$PWD/.devdeps/libinih.a" CFLAGS="-O2 -g -I$PWD/.devdeps/include")
fi
make -j"$(nproc)" "${MK[@]}" build/libflextensor.so build/bin/ft-trace >"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
LL=(--layers "$LAYERS" --hidden 4096)
python3 bench/llama_forward.py /tmp/llama-plain.pt "${LL[@]}" --iters 2 >"$OUT/res-plain.txt" 2>&1
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_GPU_MEM_LIMIT="$BUDGET" FT_LOG_DIAGNOSTICS=1 \
    FT_TRACE_FILE="$OUT/res-trace.bin" LD_PRELOAD="$PWD/build/libflextensor.so" \
    python3 bench/llama_forward.py /tmp/llama-res.pt "${LL[@]}" --iters "$ITERS" >"$OUT/res-shim.txt" 2>&1
python3 - /tmp/llama-plain.pt /tmp/llama-res.pt >>"$OUT/res-shim.txt" 2>&1 <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
print("bitwise_equal", all(torch.equal(a[0], y) for y in b), "forwards", len(b))
PY
build/bin/ft-trace "$OUT/res-trace.bin" >"$OUT/res-trace.txt" 2>&1
echo "== llama $LAYERS layers at $BUDGET"
grep -E 'plan \(|bitwise_equal|residency:|forward_s|error|warning' "$OUT/res-shim.txt" | cut -c1-400
