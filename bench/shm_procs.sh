#!/usr/bin/env bash
# bench/shm_procs.sh: issue 12's GPU figure for FT_SHM_ENABLED. NPROC (3) processes of
# one Llama (LAYERS 16, HIDDEN 4096: about 7 GB of bf16 weights, random, no download),
# each under `ft-run --gpu-mem $BUDGET` (2.5GiB), run at once, without sharing and then
# with one shared host copy; their outputs compared bitwise with a run without
# FlexTensor, their host memory sampled from /proc, their step times side by side.
#
#   OUT=/some/dir bash bench/shm_procs.sh                  (about 4-5 minutes)
#   TINY=1 OUT=/some/dir bash bench/shm_procs.sh           the smoke test (about 1-2 minutes):
#                          LAYERS=2 HIDDEN=256, budget 1/2: the pipeline, not the figure
#                          (FlexTensor most likely makes no plan for so small a model)
#
# Phases, one after the other, each process running bench/offload_bench.py (the model
# loaded by mmap from the weights file, model.to("cuda"), WARMUP + ITERS decode
# forwards 1x1, 2 + min(5, ITERS) prefills 8x512, no generate; outputs saved):
#   A  one process without FlexTensor: the reference outputs, step times, memory, link
#   B  NPROC at once under ft-run --gpu-mem $BUDGET: private pinned host copies
#   C  NPROC at once, the same with FT_SHM_ENABLED=1 FT_SHM_NAMESPACE=<this run's>
# The processes of B and C wait for each other before their timed decode steps and
# again before their timed prefills (offload_bench.py --barrier), so that they stream
# over the one link at once. Beside every phase, bench/shm_procs.py samples host memory
# every SAMPLE_EVERY s: per process /proc/PID/smaps_rollup and smaps (Pss by kind of
# mapping: FlexTensor's segment, driver-mapped pinned memory, anonymous, the weights
# file), /proc/meminfo and FlexTensor's segments in /dev/shm. The table (printed last,
# and $OUT/shm-summary.txt) gives each process's status, bitwise equality with A, decode
# and prefill medians; the host memory at steady state (the timed steps) and at peak;
# and FlexTensor's host stores of the NPROC processes over one process's streamed bytes,
# four ways (its exit report; smaps segment + pinned; all Pss; the system's), target
# <= 1.2x with sharing (about NPROC x without).
#
# Variables: LAYERS HIDDEN BUDGET NPROC WARMUP (8) ITERS (8), PHASES ("A B C"), DEADLINE
# (seconds from the start after which no phase starts, default 540: a device call ends
# at 600), PROC_TIMEOUT (seconds a process, default 240, less when the deadline is
# nearer), SAMPLE_EVERY (0.5), FTENV (extra VAR=VALUE words for B and C, e.g.
# "FT_DISCOVERY_ITERS=2": every FT_* of the caller is unset), WEIGHTS, OUT, SHM_WORK
# (logs and outputs, default /tmp/ft_shm). The weights file is offload.sh's
# (ft_bench_weights_L<LAYERS>_H<HIDDEN>.pt in /dev/shm or /tmp/ft_offload), made once.
# $OUT receives shm-summary.txt, shm-summary.json, shm-logs.tar.gz (every log, JSON and
# memory sample) and copies of shm-B1.log and shm-C1.log. It builds the shim as
# bench/conformance/run.sh does (.devdeps/ where the headers are missing).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
T_START=$SECONDS
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
WORK=${SHM_WORK:-/tmp/ft_shm}
LOGS=$WORK/logs-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# FlexTensor's configuration comes from ft-run --gpu-mem (and FTENV) alone: no FT_* of
# the caller (FT_CONFIG_FILE included) reaches the processes.
while IFS= read -r v; do
    unset "$v"
done < <(compgen -e | grep '^FT_')

tiny=
if [ -n "${TINY:-}" ] && [ "$TINY" != 0 ]; then
    tiny=1
    LAYERS=${LAYERS:-2}
    HIDDEN=${HIDDEN:-256}
    ITERS=${ITERS:-4}
else
    LAYERS=${LAYERS:-16}
    HIDDEN=${HIDDEN:-4096}
    BUDGET=${BUDGET:-2.5GiB}
fi
NPROC=${NPROC:-3}
WARMUP=${WARMUP:-8}
ITERS=${ITERS:-8}
PHASES=${PHASES:-A B C}
DEADLINE=${DEADLINE:-540}
PROC_TIMEOUT=${PROC_TIMEOUT:-240}
SAMPLE_EVERY=${SAMPLE_EVERY:-0.5}
FTENV=${FTENV:-}
read -r -a ftenv <<<"$FTENV"
RESERVE=30  # seconds kept after the last phase for the table, the archive, the clean-up
NS=shmbench-$$-$(date +%s)
BIG=/tmp/ft_offload
B=bench/offload_bench.py
S=bench/shm_procs.py
FTRUN=$PWD/build/bin/ft-run
for v in LAYERS HIDDEN NPROC WARMUP ITERS DEADLINE PROC_TIMEOUT; do
    if ! [[ ${!v} =~ ^[0-9]+$ ]] || [ "${!v}" -lt 1 ]; then
        echo "shm_procs: $v=${!v} is not a positive integer" >&2
        exit 2
    fi
done
elapsed() { echo $((SECONDS - T_START)); }
left() { echo $((DEADLINE - (SECONDS - T_START) - RESERVE)); }

SAMPLER=
RUNNING=()
cleanup() {
    [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
    local p
    for p in ${RUNNING[@]+"${RUNNING[@]}"}; do
        [ -n "$p" ] && kill "$p" 2>/dev/null
    done
    [ -x "$FTRUN" ] && "$FTRUN" --shm-clean "$NS" >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The table and the archive: written at the end, and by a failure before it.
finish() {
    python3 "$S" report "$LOGS" --json "$OUT/shm-summary.json" >"$OUT/shm-summary.txt" 2>"$LOGS/report.err" || {
        echo "shm_procs: the report failed (report.err below)" >>"$OUT/shm-summary.txt"
        tail -20 "$LOGS/report.err" >>"$OUT/shm-summary.txt"
    }
    local t
    for t in B1 C1; do
        [ -f "$LOGS/$t.log" ] && cp "$LOGS/$t.log" "$OUT/shm-$t.log"
    done
    tar -C "$(dirname "$LOGS")" -czf "$OUT/shm-logs.tar.gz" "$(basename "$LOGS")" 2>/dev/null
}
# fatal MESSAGE: says it in the summary too, and stops.
fatal() {
    echo "shm_procs: $*" >&2
    echo "== shm_procs: $*" >"$OUT/shm-summary.txt"
    tar -C "$(dirname "$LOGS")" -czf "$OUT/shm-logs.tar.gz" "$(basename "$LOGS")" 2>/dev/null
    exit 1
}

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1 | tail -1
    echo "git $(git rev-parse --short HEAD 2>/dev/null) ($(git status --porcelain 2>/dev/null | wc -l) changed); $(nproc) cores; $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM; kernel $(uname -r); ulimit -l $(ulimit -l)"
    df -h /dev/shm 2>&1 | tail -1
} >"$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

# --- the shim, as bench/conformance/run.sh builds it (SETUP=0 with .devdeps/ where the
# headers are missing); a build already there serves when make cannot run
MK=()
if [ ! -f /usr/include/ini.h ] && [ -d .devdeps ]; then
    MK=(SETUP=0 INIH_LIB="$PWD/.devdeps/libinih.a" CFLAGS="-O2 -g -I$PWD/.devdeps/include")
fi
t0=$SECONDS
if ! make -j"$(nproc)" ${MK[@]+"${MK[@]}"} build/libflextensor.so build/libflextensor-nvtx.so build/bin/ft-run \
        >"$LOGS/build.log" 2>&1; then
    if [ -f build/libflextensor.so ] && [ -x "$FTRUN" ]; then
        echo "shm_procs: make failed; the build/ already there is used (build.log)"
    else
        tail -30 "$LOGS/build.log" >&2
        fatal "the build failed and there is no build/libflextensor.so and build/bin/ft-run (build.log in shm-logs.tar.gz)"
    fi
fi
echo "build: $((SECONDS - t0)) s"

# --- sizes: the weights (bf16, as ftbench.llama_config shapes them), the budget
inter=$((HIDDEN * 43 / 16 / 256 * 256))  # int(hidden * 2.6875) // 256 * 256
wbytes=$((2 * (LAYERS * (4 * HIDDEN * HIDDEN + 3 * HIDDEN * inter + 2 * HIDDEN) + 2 * 32000 * HIDDEN + HIDDEN)))
if [ -z "${BUDGET:-}" ]; then
    # TINY: half the weights, in KiB below 64 MiB (FT_GPU_MEM_LIMIT takes 1MiB at least)
    half=$((wbytes / 2))
    if [ "$half" -ge $((64 << 20)) ]; then BUDGET="$((half >> 20))MiB"; else BUDGET="$((half >> 10))KiB"; fi
fi
budget_bytes=$(python3 - "$BUDGET" <<'PY'
import re, sys
m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", sys.argv[1])
units = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
         "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
if not m or m.group(2).lower() not in units:
    sys.exit(1)
print(int(float(m.group(1)) * units[m.group(2).lower()]))
PY
) || fatal "cannot read BUDGET=$BUDGET (e.g. 2.5GiB, 2560MiB)"

# --- the weights file: offload.sh's name, /dev/shm when it holds the weights and the
# shared segment (at most the weights) with 3 GiB to spare, else /tmp/ft_offload
shm_free_kib() { df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }'; }
wname=ft_bench_weights_L${LAYERS}_H${HIDDEN}.pt
if [ -z "${WEIGHTS:-}" ]; then
    if [ -f "/dev/shm/$wname" ]; then
        WEIGHTS=/dev/shm/$wname
    elif [ -f "$BIG/$wname" ]; then
        WEIGHTS=$BIG/$wname
    elif [ "$(shm_free_kib)" -ge $(((2 * wbytes + (3 << 30)) / 1024)) ] 2>/dev/null; then
        WEIGHTS=/dev/shm/$wname
    else
        WEIGHTS=$BIG/$wname
    fi
fi
mkdir -p "$(dirname "$WEIGHTS")"
COMMON=(--layers "$LAYERS" --hidden "$HIDDEN" --weights "$WEIGHTS" --warmup "$WARMUP" --iters "$ITERS" --no-generate)

t0=$SECONDS
if [ -f "$WEIGHTS" ]; then
    echo "weights: $WEIGHTS exists, reused"
else
    echo "weights: making $WEIGHTS ($((wbytes >> 20)) MiB)"
    tmo=300
    [ "$(left)" -lt 400 ] && tmo=$(($(left) - 100))
    [ "$tmo" -lt 30 ] && fatal "no time left to make the weights (DEADLINE=$DEADLINE)"
    timeout -k 10 "$tmo" python3 "$B" make "$LOGS/make.json" --layers "$LAYERS" --hidden "$HIDDEN" \
        --weights "$WEIGHTS" >"$LOGS/make.log" 2>&1
    rc=$?
    tail -1 "$LOGS/make.log"
    if [ $rc -ne 0 ] || [ ! -f "$WEIGHTS" ]; then
        tail -20 "$LOGS/make.log" >&2
        fatal "making the weights failed (rc $rc; make.log in shm-logs.tar.gz)"
    fi
fi
echo "weights ready after $((SECONDS - t0)) s"
WEIGHTS_REAL=$(realpath -m "$WEIGHTS")

# The shared segment needs about the streamed bytes in /dev/shm: without room, C's
# units keep private copies (said in their logs), and the figure means nothing.
shm_note=
free_kib=$(shm_free_kib)
seg_kib=$(((wbytes - budget_bytes + (1 << 30)) / 1024))
if [ -z "$free_kib" ] || [ "$free_kib" -lt "$seg_kib" ]; then
    shm_note="/dev/shm has ${free_kib:-?} KiB free; the segment needs about $seg_kib KiB: C's units may keep private copies"
    echo "shm_procs: warning: $shm_note" >&2
fi
{
    echo "LAYERS=$LAYERS"; echo "HIDDEN=$HIDDEN"; echo "BUDGET=$BUDGET"; echo "BUDGET_BYTES=$budget_bytes"
    echo "NPROC=$NPROC"; echo "WARMUP=$WARMUP"; echo "ITERS=$ITERS"; echo "NS=$NS"
    echo "WEIGHTS=$WEIGHTS_REAL"; echo "WEIGHTS_BYTES=$wbytes"; echo "TINY=$tiny"; echo "FTENV=$FTENV"
    echo "SHM_NOTE=$shm_note"
} >"$LOGS/meta.txt"
: >"$LOGS/runs.tsv"

# run_phase P N KIND: N processes at once (KIND plain: without FlexTensor; ft: under
# ft-run --gpu-mem $BUDGET; shm: the same with FT_SHM_ENABLED), the sampler beside them.
# Each process ends in a line of runs.tsv: phase, tag, kind, exit status, seconds.
run_phase() {
    local P=$1 n=$2 kind=$3 tmo i tag mode rc bar=$LOGS/bar-$1 todo
    local pids=() starts=() procs=() cmd
    tmo=$PROC_TIMEOUT
    [ "$(left)" -lt "$tmo" ] && tmo=$(left)
    if [ "$tmo" -lt 60 ]; then
        for ((i = 1; i <= n; i++)); do
            printf '%s\t%s\t%s\tskip\t0\n' "$P" "$P$i" "$kind" >>"$LOGS/runs.tsv"
        done
        echo "[$(elapsed) s] phase $P: skipped, $(left) s left before DEADLINE"
        return
    fi
    mkdir -p "$bar"
    rm -f "$bar"/*
    for ((i = 1; i <= n; i++)); do
        procs+=(--proc "$P$i=$LOGS/$P$i.json")
    done
    python3 "$S" sample "$LOGS/mem-$P.jsonl" --every "$SAMPLE_EVERY" --ns "$NS" --weights "$WEIGHTS_REAL" \
        --max-s $((tmo + 60)) "${procs[@]}" >"$LOGS/sampler-$P.log" 2>&1 &
    SAMPLER=$!
    sleep 1.5  # samples of the host before any process starts: the phase's baseline
    mode=shim
    [ "$kind" = plain ] && mode=plain
    for ((i = 1; i <= n; i++)); do
        tag=$P$i
        rm -f "$WORK/$tag.pt"
        cmd=(python3 "$B" "$mode" "$LOGS/$tag.json" "${COMMON[@]}" --tensors "$WORK/$tag.pt")
        [ "$n" -gt 1 ] && cmd+=(--barrier "$bar,$((i - 1)),$n")
        case $kind in
            ft) cmd=(env ${ftenv[@]+"${ftenv[@]}"} "$FTRUN" --gpu-mem "$BUDGET" "${cmd[@]}") ;;
            shm) cmd=(env FT_SHM_ENABLED=1 FT_SHM_NAMESPACE="$NS" ${ftenv[@]+"${ftenv[@]}"} "$FTRUN" --gpu-mem "$BUDGET"
                      "${cmd[@]}") ;;
        esac
        echo "${cmd[*]}" >"$LOGS/$tag.log"
        timeout -k 10 "$tmo" "${cmd[@]}" >>"$LOGS/$tag.log" 2>&1 &
        pids+=($!)
        starts+=($SECONDS)
    done
    RUNNING=("${pids[@]}")
    echo "[$(elapsed) s] phase $P: $n process(es) ($kind), $tmo s each at most"
    # Wait for each; the first that fails frees the others from the barrier.
    todo=$n
    while [ "$todo" -gt 0 ]; do
        sleep 0.5
        for ((i = 0; i < n; i++)); do
            [ -z "${pids[i]}" ] && continue
            kill -0 "${pids[i]}" 2>/dev/null && continue
            wait "${pids[i]}"
            rc=$?
            tag=$P$((i + 1))
            printf '%s\t%s\t%s\t%s\t%s\n' "$P" "$tag" "$kind" "$rc" "$((SECONDS - starts[i]))" >>"$LOGS/runs.tsv"
            echo "[$(elapsed) s] $tag: rc $rc, $((SECONDS - starts[i])) s"
            [ "$rc" -ne 0 ] && touch "$bar/abort"
            pids[i]=
            todo=$((todo - 1))
        done
    done
    RUNNING=()
    sleep 1  # a sample after they ended
    kill "$SAMPLER" 2>/dev/null
    wait "$SAMPLER" 2>/dev/null
    SAMPLER=
    finish  # the table so far: a call cut short still brings one back
}

for P in $PHASES; do
    case $P in
        A) run_phase A 1 plain ;;
        B) run_phase B "$NPROC" ft ;;
        C) run_phase C "$NPROC" shm ;;
        *) echo "shm_procs: PHASES: $P is not A, B or C" >&2 ;;
    esac
done

# The last process to leave removes the segment; anything left is removed here.
clean=$("$FTRUN" --shm-clean "$NS" 2>&1 | tr '\n' ' ')
echo "CLEAN=ft-run --shm-clean $NS: $clean" >>"$LOGS/meta.txt"
finish
echo
cat "$OUT/shm-summary.txt"
echo "(logs: $LOGS, in $OUT/shm-logs.tar.gz; outputs: $WORK; $(elapsed) s)"
# exit status 1 when a process failed or timed out (a skipped one is in the table only)
! awk -F'\t' '$4 != "0" && $4 != "skip"' "$LOGS/runs.tsv" | grep -q .
