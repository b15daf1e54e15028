#!/usr/bin/env bash
# bench/run.sh (make gpu-check): everything only a GPU can show, in one call on the
# device machine. Builds there, runs the checks, writes logs under $OUT and prints a
# short table last. Figures go to bench/RESULTS.md by hand, with date and command.
#
#   bash bench/run.sh            all checks (about 9 minutes: close to one call's limit)
#   BENCH_QUICK=1 bash ...    smaller Llama (4 layers), no 13.5 GB model, for a fast look
#   OFFLOAD_MODES="plain shim accelerate overhead"   the 13.5 GB model's other runs too
#                                                    (longer: better run offload.sh alone)
#   BENCH_TP=1                on a machine with two GPUs, bench/tp.sh too (TP_MODES)
#
# Only 8 files come back from a device call's $OUT: the table (summary.txt,
# offload/offload-summary.txt) and the logs to read first should be copied there.
#
# The build needs libinih and uthash headers; where the machine lacks them, the
# caller carries them in .devdeps/ (bench/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
declare -a ROWS=()
row() { ROWS+=("$(printf '%-46s %-6s %s' "$1" "$2" "$3")"); }
SHIM=$PWD/build/libflextensor.so

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -1
    ldd --version | head -1
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

MK=()
if [ ! -f /usr/include/ini.h ] && [ -d .devdeps ]; then
    # SETUP=0: the GPU machine has no package archive to install from (.devdeps/ stands in)
    MK=(SETUP=0 INIH_LIB="$PWD/.devdeps/libinih.a" CFLAGS="-O2 -g -I$PWD/.devdeps/include")
fi
if make -j"$(nproc)" "${MK[@]}" build/libflextensor.so build/libflextensor-nvtx.so build/bin/ft-run \
        build/bin/ft-trace gpu-example >"$OUT/build.log" 2>&1; then
    row "build (shim, tools, model-gpu)" "ok" ""
else
    row "build" "FAIL" "see build.log"
    tail -30 "$OUT/build.log"
    printf '%s\n' "${ROWS[@]}"
    exit 1
fi
make -j"$(nproc)" "${MK[@]}" build/examples/model-sim >>"$OUT/build.log" 2>&1 || true

# --- 1. the example model: the same checksum on the simulator, the GPU, under the shim
ARGS=(--layers 16 --dim 2048 --iters 3)
checksum() { grep '^checksum' "$1" 2>/dev/null | awk '{print $2}'; }
LD_LIBRARY_PATH=build/sim build/examples/model-sim "${ARGS[@]}" >"$OUT/model-sim.txt" 2>&1
build/examples/model-gpu "${ARGS[@]}" >"$OUT/model-gpu.txt" 2>&1
FT_ENABLED=1 FT_TRACE_FILE="$OUT/model-trace.bin" LD_PRELOAD=$SHIM \
    build/examples/model-gpu "${ARGS[@]}" >"$OUT/model-gpu-shim.txt" 2>&1
FT_ENABLED=0 LD_PRELOAD=$SHIM build/examples/model-gpu "${ARGS[@]}" >"$OUT/model-gpu-off.txt" 2>&1
build/bin/ft-trace "$OUT/model-trace.bin" >"$OUT/model-trace.txt" 2>&1
sim=$(checksum "$OUT/model-sim.txt"); gpu=$(checksum "$OUT/model-gpu.txt")
on=$(checksum "$OUT/model-gpu-shim.txt"); off=$(checksum "$OUT/model-gpu-off.txt")
[ -n "$sim" ] && [ "$sim" = "$gpu" ] && r=ok || r=FAIL
row "example model: simulator = GPU" "$r" "sim $sim gpu $gpu"
[ -n "$gpu" ] && [ "$gpu" = "$on" ] && [ "$gpu" = "$off" ] && r=ok || r=FAIL
row "example model: GPU under shim (on, off)" "$r" "on $on off $off"
units=$(grep -E '^  units +[0-9]+' "$OUT/model-trace.txt" | awk '{print $2}')
[ "$units" = "16" ] && r=ok || r=FAIL
row "example model: discovery finds 16 units" "$r" "units=${units:-none}"

# --- 2. Llama (transformers, random bf16 weights) in discovery: bitwise equal logits
LAYERS=16; [ -n "${BENCH_QUICK:-}" ] && LAYERS=4
LL=(--layers $LAYERS --hidden 4096 --iters 4)
timeout 400 python3 bench/llama_forward.py "$OUT/llama-plain.pt" "${LL[@]}" >"$OUT/llama-plain.txt" 2>&1
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_TRACE_FILE="$OUT/llama-trace.bin" LD_PRELOAD=$SHIM \
    timeout 400 python3 bench/llama_forward.py "$OUT/llama-shim.pt" "${LL[@]}" >"$OUT/llama-shim.txt" 2>&1
python3 - "$OUT/llama-plain.pt" "$OUT/llama-shim.pt" >"$OUT/llama-compare.txt" 2>&1 <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
print("bitwise_equal", len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)))
PY
grep -q "bitwise_equal True" "$OUT/llama-compare.txt" && r=ok || r=FAIL
row "llama $LAYERS layers: logits shim = plain" "$r" "$(tail -1 "$OUT/llama-compare.txt")"
build/bin/ft-trace "$OUT/llama-trace.bin" >"$OUT/llama-trace.txt" 2>&1
build/bin/ft-trace --json "$OUT/llama-trace.bin" >"$OUT/llama-trace.json" 2>&1
python3 - "$OUT/llama-trace.json" "$OUT/llama-plain.txt" "$LAYERS" >"$OUT/llama-units.txt" 2>&1 <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
params = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["param_bytes"]
units = t.get("units", [])
wbytes = sum(u["bytes"] for u in units)
print(f"units={len(units)} want={int(sys.argv[3]) + 2} unit_bytes={wbytes} param_bytes={params} "
      f"attributed={100.0 * wbytes / params:.1f}%")
PY
cat "$OUT/llama-units.txt"
n=$(sed -n 's/.*units=\([0-9]*\) want=\([0-9]*\).*/\1 \2/p' "$OUT/llama-units.txt")
att=$(sed -n 's/.*attributed=\([0-9.]*\)%.*/\1/p' "$OUT/llama-units.txt")
[ -n "$n" ] && [ "$(echo $n | awk '{print $1==$2}')" = 1 ] && r=ok || r=FAIL
row "llama: one unit per layer + embed + head" "$r" "$(sed -n 's/.*\(units=[0-9]* want=[0-9]*\).*/\1/p' "$OUT/llama-units.txt")"
[ -n "$att" ] && [ "$(awk -v a="$att" 'BEGIN{print (a >= 95) ? 1 : 0}')" = 1 ] && r=ok || r=FAIL
row "llama: >= 95% of parameter bytes in units" "$r" "${att:-?}%"

# --- 2b. profiling, the plan under a budget of about a third of the weights, and the
# residency engine (prefetch on a side stream, demand fetch after a miss): the
# logits of every forward, offloaded ones included, must equal the plain run's
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_GPU_MEM_LIMIT=2560MiB FT_LOG_DIAGNOSTICS=1 \
    FT_TRACE_FILE="$OUT/llama-plan.bin" LD_PRELOAD=$SHIM \
    timeout 400 python3 bench/llama_forward.py "$OUT/llama-plan.pt" --layers $LAYERS --hidden 4096 --iters 8 \
    >"$OUT/llama-plan.txt" 2>&1
python3 - "$OUT/llama-plain.pt" "$OUT/llama-plan.pt" >>"$OUT/llama-plan.txt" 2>&1 <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
print("bitwise_equal", all(torch.equal(a[0], y) for y in b))
PY
grep -q "bitwise_equal True" "$OUT/llama-plan.txt" && grep -q "plan (memory mode" "$OUT/llama-plan.txt" && r=ok || r=FAIL
row "llama: planned and offloaded at 2.5 GiB" "$r" "$(grep -o 'predicted step [0-9.]* us against [0-9.]* us' "$OUT/llama-plan.txt" | head -1)"
grep -o 'host to device [0-9.]* GB/s, device to host [0-9.]* GB/s; both at once [0-9.]* and [0-9.]* GB/s' \
    "$OUT/llama-plan.txt" | head -1 | sed 's/^/  bandwidth: /' >>"$OUT/summary-extra.txt"
grep -o 'measured step [0-9.]* us (median of [0-9]*' "$OUT/llama-plan.txt" | head -1 \
    | sed 's/^/  residency: /' >>"$OUT/summary-extra.txt"
grep -o '"mem_get_info": \[[0-9]*, [0-9]*\]' "$OUT/llama-plan.txt" | head -1 \
    | sed 's/^/  under the shim: /' >>"$OUT/summary-extra.txt"
grep -oE '(host time in FlexTensor per launch|one-time work in launches).*' "$OUT/llama-plan.txt" | head -2 \
    | sed 's/^/  llama at 2.5 GiB: /' >>"$OUT/summary-extra.txt"

# --- 2c. NVTX ranges name the units: a small Llama whose embeddings, layers and head
# run inside ranges named after them (bench/nvtx_units.py), under ft-run (which injects
# libflextensor-nvtx.so); its logits equal a run without the shim
(cd bench && python3 nvtx_units.py --layers 4 >"$OUT/nvtx-plain.txt" 2>&1)
sha() { sed -n 's/.*"sha1": "\([0-9a-f]*\)".*/\1/p' "$1" | tail -1 | cut -c1-12; }
ps=$(sha "$OUT/nvtx-plain.txt")
nvtx_check() { # NAME EXTRA...: under ft-run, sets `named` (of 6) and `ss` (the logits' hash)
    local name=$1
    shift
    (cd bench && FT_DISCOVERY_ITERS=2 FT_LOG_LEVEL=${NVTX_LOG:-info} ../build/bin/ft-run --trace "$OUT/$name.bin" \
        python3 nvtx_units.py --layers 4 "$@" >"$OUT/$name-shim.txt" 2>"$OUT/$name-shim.err")
    build/bin/ft-trace "$OUT/$name.bin" >"$OUT/$name-trace.txt" 2>&1
    named=$(grep -oE '(^|[[:space:]])(layers\.[0-3]|embed_tokens|lm_head)([[:space:]]|$)' "$OUT/$name-trace.txt" \
        | sort -u | wc -l)
    ss=$(sha "$OUT/$name-shim.txt")
    [ -n "$ps" ] && [ "$ps" = "$ss" ] && [ "$named" = 6 ] && r=ok || r=FAIL
}
nvtx_check nvtx
row "nvtx: units named after the ranges" "$r" "$named of 6 names in ft-trace's units; logits: plain ${ps:-none}, shim ${ss:-none}"
# the same with the last logits alive through the next forward: small activations then
# alternate between two placements, the detector's pass is two forwards, folded to one
NVTX_LOG=trace nvtx_check nvtxk --keep-logits
grep -E 'discovery: (detector|the pass found)' "$OUT/nvtxk-shim.err" >"$OUT/nvtxk-detector.txt"
row "nvtx, last logits kept alive: same units" "$r" "$named of 6 names; $(grep -o 'the pass found is [0-9]* copies' "$OUT/nvtxk-shim.err" | head -1); logits ${ss:-none}"

# --- 3a. per-launch host cost, C launcher (bench/launch_cost.c): five rounds, the
# configurations interleaved in each, medians reported; launches pick among 256 weights
# in an order with no period, so discovery never reaches a boundary; with --repeat
# (rep: no shim; plan: FT_ENABLED=1, budget above the weights) they go over the weights
# in order, so the plan is made (it streams nothing) before the timed launches
make -j"$(nproc)" "${MK[@]}" gpu-bench >>"$OUT/build.log" 2>&1
LC=build/bench/launch_cost-gpu
declare -A LCV=()
for round in 1 2 3 4 5; do
    for cfg in none off disc disc_nocupti rep plan; do
        case $cfg in
            none) v=$($LC) ;;
            off) v=$(FT_ENABLED=0 LD_PRELOAD=$SHIM $LC) ;;
            disc) v=$(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=1000 LD_PRELOAD=$SHIM $LC) ;;
            disc_nocupti) v=$(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=1000 FT_CUPTI=off LD_PRELOAD=$SHIM $LC) ;;
            rep) v=$($LC --repeat) ;;
            plan) v=$(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 \
                      FT_GPU_MEM_LIMIT=120GiB LD_PRELOAD=$SHIM $LC --repeat) ;;
        esac
        LCV[$cfg]+="$(echo "$v" | sed -n 's/.*"ns_per_launch": \([0-9.]*\).*/\1/p') "
    done
done
med() { echo "$1" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "?")}'; }
echo "launch_cost ns: $(for k in none off disc disc_nocupti rep plan; do echo -n "$k [${LCV[$k]}] "; done)" >"$OUT/launch_cost.txt"
row "C launch cost, median ns (5 rounds)" "info" "none $(med "${LCV[none]}") | off $(med "${LCV[off]}") | discovery $(med "${LCV[disc]}") (no CUPTI $(med "${LCV[disc_nocupti]}")) | in order: none $(med "${LCV[rep]}"), after the plan $(med "${LCV[plan]}")"

# --- 3. per-launch host cost: no shim, preloaded off, discovery. (The rows with
# discovery skipped are gone: FT_SKIP_DISCOVERY=1 switched the engine off without a
# word and is now a configuration error, so that mode can no longer be measured.)
lo() { python3 bench/launch_overhead.py "$@" 2>/dev/null | sed -n 's/.*"us_per_launch": \([0-9.]*\).*/\1/p'; }
base=$(lo)
off=$(FT_ENABLED=0 LD_PRELOAD=$SHIM lo)
disc=$(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=1000 LD_PRELOAD=$SHIM lo)
disc_nc=$(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_CUPTI=off FT_DISCOVERY_ITERS=1000 LD_PRELOAD=$SHIM lo)
base2=$(lo)
echo "launch us: base $base/$base2 off $off discovery $disc discovery-nocupti $disc_nc" | tee "$OUT/overhead.txt"
row "torch add_ launch cost (us)" "info" "none $base/$base2 | off $off | discovery $disc (no CUPTI $disc_nc)"

# --- 4. the 13.5 GB Llama under a third of its size (bench/offload.sh; its accelerate
# and overhead runs take longer: OFFLOAD_MODES="plain shim accelerate overhead", or
# offload.sh alone)
if [ -z "${BENCH_QUICK:-}" ]; then
    OUT="$OUT/offload" MODES="${OFFLOAD_MODES:-plain shim}" timeout 330 bash bench/offload.sh \
        >"$OUT/offload.txt" 2>&1
    for step in decode prefill; do
        l=$(grep -E "^$step [0-9x]+ ms" "$OUT/offload.txt" | head -1)
        ratio=$(awk '{print $8}' <<<"$l")
        [ -n "$ratio" ] && [ "$ratio" != "-" ] && r=$(awk -v x="$ratio" 'BEGIN{print (x <= 1.10) ? "ok" : "MISS"}') || r=FAIL
        row "13.5 GB Llama at 4.5 GiB: $step / link bound" "$r" "$(awk '{print "FT " $5 " ms, link " $6 " ms, all resident " $4 " ms, ratio " $8}' <<<"$l")"
    done
    grep -q "bitwise shim = plain: decode True, prefill True, generate True" "$OUT/offload.txt" && r=ok || r=FAIL
    row "13.5 GB Llama: shim = plain, bitwise" "$r" "$(grep -o 'bitwise shim = plain: [^;]*' "$OUT/offload.txt" | head -1)"
fi

# --- 5. tensor parallel under torchrun, when the machine has two GPUs and BENCH_TP=1
# (bench/tp.sh; about 3 minutes more, which a full run.sh does not leave in one call)
if [ -n "${BENCH_TP:-}" ] && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    OUT="$OUT/tp" MODES="${TP_MODES:-plain shim}" timeout 300 bash bench/tp.sh >"$OUT/tp.txt" 2>&1
    for mode in shim spill; do
        lines=$(grep -E "^ +[0-9]+ +$mode " "$OUT/tp/tp-summary.txt" 2>/dev/null)
        [ -z "$lines" ] && continue
        grep -qv "yes/yes/yes" <<<"$lines" && r=FAIL || r=ok
        row "tensor parallel, 2 processes, $mode: = plain" "$r" "$(awk '{printf "rank %s %s ms decode (link %s); ", $1, $4, $6}' <<<"$lines")"
    done
fi

# --- 6. one process on two GPUs (bench/two_devices.sh, about a minute), when the
# machine has two: not supported yet, so FlexTensor must stand down and leave the
# program's results unchanged
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    OUT="$OUT/two" timeout 240 bash bench/two_devices.sh >"$OUT/two.txt" 2>&1
    l=$(grep -o 'per forward: [0-9]* of [0-9]* bitwise equal' "$OUT/two.txt")
    n=$(awk '{print $3, $5}' <<<"$l")
    [ -n "$l" ] && [ "$(cut -d' ' -f1 <<<"$n")" = "$(cut -d' ' -f2 <<<"$n")" ] \
        && grep -q 'FlexTensor stands down' "$OUT/two.txt" && r=ok || r=FAIL
    row "one process on 2 GPUs: stands down, = plain" "$r" "${l:-no comparison}"
fi

echo
echo "== FlexTensor GPU checks ($(head -1 "$OUT/env.txt"))"
printf '%-46s %-6s %s\n' "check" "result" "detail"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/summary.txt"
cat "$OUT/summary-extra.txt" 2>/dev/null
! grep -q FAIL "$OUT/summary.txt"
