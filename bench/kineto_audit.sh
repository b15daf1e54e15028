#!/usr/bin/env bash
# bench/kineto_audit.sh: on the GPU, which CPU-side CUPTI records share a correlation id
# under FlexTensor in the conformance case `profiler` (torch.profiler around 5 forwards
# during discovery: "inserted.second INTERNAL ASSERT FAILED" at collection.cpp:1152,
# setParents), and whether FlexTensor carrying on under the profiler
# (FT_CUPTI_HANDOVER=carry-on: its calls inside driver hooks made on its own-call thread)
# keeps clear of it. Three processes:
#   R  the case without FlexTensor (the reference: outputs and profiler event counts)
#   A  FT_CUPTI_AUDIT=1                             (stand-down, the default)
#   B  FT_CUPTI_AUDIT=1 FT_CUPTI_HANDOVER=carry-on
# A and B under `ft-run --gpu-mem $GPU_MEM` (default 970MiB), PROC_TIMEOUT s each (240).
# Prints, per run: the exit status, whether the assert fired, the profiler windows'
# event counts, the comparison with R, the audit's exit line (ids seen twice, the pairs
# of calls, most frequent first) and its first duplicate lines, the verdict; the logs go
# to $OUT (default /tmp/kineto_audit).
#
#   bash bench/kineto_audit.sh        (from the repository root; builds the shim first)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/kineto_audit}
GPU_MEM=${GPU_MEM:-970MiB}
PROC_TIMEOUT=${PROC_TIMEOUT:-240}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^FT_')

MK=()
if [ ! -f /usr/include/ini.h ] && [ -d .devdeps ]; then
    MK=(SETUP=0 INIH_LIB="$PWD/.devdeps/libinih.a" CFLAGS="-O2 -g -I$PWD/.devdeps/include")
fi
make -j"$(nproc)" "${MK[@]}" build/libflextensor.so build/libflextensor-nvtx.so build/bin/ft-run \
    >"$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }

timeout -k 10 "$PROC_TIMEOUT" python3 bench/conformance/cases.py profiler --out "$OUT/R.pt" --json "$OUT/R.json" \
    >"$OUT/R.log" 2>&1
echo "=== R (no FlexTensor): rc $?"
grep "^profiler " "$OUT/R.log" | sed 's/^/    /'

run() { # NAME ENV...
    local name=$1
    shift
    timeout -k 10 "$PROC_TIMEOUT" env "$@" build/bin/ft-run --gpu-mem "$GPU_MEM" \
        python3 bench/conformance/cases.py profiler --out "$OUT/$name.pt" --json "$OUT/$name.json" \
        --ref "$OUT/R.pt" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "=== $name ($*): rc $rc"
    grep "^profiler " "$OUT/$name.log" | sed 's/^/    /'
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('    compare:', d.get('compare'))" \
        "$OUT/$name.json" 2>/dev/null | cut -c1-300
    grep -c "INTERNAL ASSERT FAILED" "$OUT/$name.log" | sed 's/^/    Kineto asserts: /'
    grep -m1 "inserted.second" "$OUT/$name.log" | cut -c1-200 | sed 's/^/    /'
    grep "FT_CUPTI_AUDIT\|CUPTI audit: [0-9]* API records" "$OUT/$name.log" | cut -c1-1500 | sed 's/^/    /'
    grep "CUPTI audit: correlation id" "$OUT/$name.log" | head -12 | cut -c1-400 | sed 's/^/    /'
    echo "    duplicate lines: $(grep -c 'CUPTI audit: correlation id' "$OUT/$name.log") (capped: 100 flow, 30 other)"
    grep "verdict:" "$OUT/$name.log" | tail -1 | cut -c1-300 | sed 's/^/    /'
}
run A FT_CUPTI_AUDIT=1
run B FT_CUPTI_AUDIT=1 FT_CUPTI_HANDOVER=carry-on
