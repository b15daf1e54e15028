#!/usr/bin/env bash
# bench/conformance/run.sh: the real-program conformance cases (cases.py) on the GPU.
# Each case runs once without FlexTensor (the reference: its outputs, its timings, the
# link's bandwidth), then under `ft-run --gpu-mem <weights/k>` for each k of BUDGETS,
# with no other FlexTensor setting (every FT_* variable of the caller is unset). Each
# process has its own time limit; a crash or a timeout is recorded and the rest go on.
# After every process the table is rewritten to $OUT/conformance.md (report.py), so a
# call cut short still brings one back.
#
#   GROUP=1 OUT=/some/dir bash bench/conformance/run.sh    gpu_built gpu_built_pad
#                                                          pretrained_device_map pretrained_to
#                                                          cpu_built expandable tied
#   GROUP=2 OUT=/some/dir bash bench/conformance/run.sh    moe generate two_models free_load
#                                                          profiler profiler_late graph
#   GROUP=3 BUDGETS=3 OUT=/some/dir bash ...               jax jax_prealloc jax_fraction compiled compiled_ro
#                                                          (jax_case.py; cases.py's torch.compile)
#   CASES="tied moe" BUDGETS="5" bash bench/conformance/run.sh       any subset
#   CONF_TINY=1 bash bench/conformance/run.sh              the smoke test (3-4 minutes):
#                          tiny models, without FlexTensor: every case once in one process
#                          (cases.py all), the compiled ones in another (all_compiled),
#                          jax_case.py jax and jax_prealloc; then the pipeline on cpu_built
#                          and moe at 1/3
#   REFCHECK=1 BUDGETS= GROUP=1 bash ...                   each reference twice, compared:
#                                                          is the case deterministic at all?
#
# Variables: GROUP (1, 2, 3 or all: the default case list), CASES (overrides it), BUDGETS
# (default "2 3 5": budgets of 1/2, 1/3, 1/5 of the weights; empty: references only),
# REFCHECK=1, CONF_TINY=1, CONF_STEPS (timed decode steps, cases.py --steps),
# PROC_TIMEOUT (seconds a process, default 150; the compiled cases take at least 300 and
# the JAX ones 240, for their compilation; PROC_TIMEOUT_<case>, e.g.
# PROC_TIMEOUT_compiled_ro=400, sets one case's), DEADLINE (seconds from the start after
# which nothing new starts, default 560: a device call ends at 600), OUT, CONF_WORK
# (outputs, checkpoints and logs; default /tmp/ft_conf), JAX_PYTHON (the interpreter of
# the JAX cases, default python3), CONF_AUTOTUNE (fixed, the default, or free: whether
# Inductor and XLA choose kernels by heuristics, the same in every process, or by
# timing them; cases.py, jax_case.py), CONF_COMPILE_CACHE (fresh, the default: every
# process compiles from an empty Inductor and Triton cache, as a first run; shared: one
# cache per case, which the reference fills and the runs under FlexTensor load).
#
# $OUT receives three files (a device call brings back 8): conformance.md (the table),
# conformance.json (its rows) and conformance-logs.tar.gz (every process's log and
# JSON, runs.tsv, env.txt, build.log). The outputs (.pt; .npz for JAX) and the checkpoints stay in
# $CONF_WORK. The build needs libinih and uthash; where the machine lacks them, the
# caller carries them in .devdeps/ (bench/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
T_START=$SECONDS
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
WORK=${CONF_WORK:-/tmp/ft_conf}
export CONF_WORK=$WORK
LOGS=$WORK/logs-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$LOGS"
GROUP1="gpu_built gpu_built_pad pretrained_device_map pretrained_to cpu_built expandable tied"
GROUP2="moe generate two_models free_load profiler profiler_late graph"
# the JAX cases first: the quicker; the compiled ones spend minutes compiling
GROUP3="jax jax_prealloc jax_fraction compiled compiled_ro"
DEFAULT_BUDGETS="2 3 5"
case ${GROUP:-all} in
    1) DEFAULT_CASES=$GROUP1 ;;
    2) DEFAULT_CASES=$GROUP2 ;;
    3) DEFAULT_CASES=$GROUP3 ;;
    all) DEFAULT_CASES="$GROUP1 $GROUP2 $GROUP3" ;;
    *) echo "conformance: GROUP is 1, 2, 3 or all" >&2; exit 2 ;;
esac
TINY=
if [ -n "${CONF_TINY:-}" ] && [ "${CONF_TINY}" != 0 ]; then
    # the smoke test: every case in one process first (below), then the pipeline on two
    # cases at one budget, unless GROUP, CASES or BUDGETS say otherwise
    TINY=1
    [ -z "${GROUP:-}" ] && DEFAULT_CASES="cpu_built moe"
    DEFAULT_BUDGETS=3
fi
CASES=${CASES:-$DEFAULT_CASES}
BUDGETS=${BUDGETS-$DEFAULT_BUDGETS}
PROC_TIMEOUT=${PROC_TIMEOUT:-150}
DEADLINE=${DEADLINE:-560}
PY=bench/conformance/cases.py
JAXPY=bench/conformance/jax_case.py
JAX_PYTHON=${JAX_PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# FlexTensor's configuration comes from ft-run --gpu-mem alone: no FT_* of the caller
# (FT_CONFIG_FILE included) reaches the processes.
while IFS= read -r v; do
    unset "$v"
done < <(compgen -e | grep '^FT_')

# --- what each case runs: its interpreter and script (CASE_CMD), its outputs' suffix,
# its process limit, and the compiler cache it starts from
set_case_cmd() {
    case $1 in
        jax|jax_prealloc|jax_fraction) CASE_CMD=("$JAX_PYTHON" "$JAXPY") ;;
        *) CASE_CMD=(python3 "$PY") ;;
    esac
}
out_ext() {
    case $1 in jax|jax_prealloc|jax_fraction) echo .npz ;; *) echo .pt ;; esac
}
# PROC_TIMEOUT_<case> if set, else PROC_TIMEOUT, at least 300 s for the compiled cases
# (Inductor compiles two graphs of a 28-layer Llama) and 240 s for the JAX ones
proc_timeout() {
    local v=PROC_TIMEOUT_$1 least=0
    case $1 in
        compiled|compiled_ro|all_compiled) least=300 ;;
        jax|jax_prealloc|jax_fraction) least=240 ;;
    esac
    [ "$PROC_TIMEOUT" -gt "$least" ] && least=$PROC_TIMEOUT
    echo "${!v:-$least}"
}
# compile_env CASE TAG: the `env` words that give a compiled case's process its Inductor
# and Triton cache: its own, emptied (CONF_COMPILE_CACHE=fresh), or its case's
# (shared: emptied before the reference); nothing for the other cases
compile_env() {
    local d
    case $1 in compiled|compiled_ro|all_compiled) ;; *) return 0 ;; esac
    if [ "${CONF_COMPILE_CACHE:-fresh}" = shared ]; then
        d=$WORK/inductor-$1
        case $2 in *-ref|smoke*) rm -rf "$d" ;; esac
    else
        d=$WORK/inductor-$2
        rm -rf "$d"
    fi
    echo "env TORCHINDUCTOR_CACHE_DIR=$d TRITON_CACHE_DIR=$d/triton"
}

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1 | tail -1
    echo "git $(git rev-parse --short HEAD 2>/dev/null) ($(git status --porcelain 2>/dev/null | wc -l) changed), CASES=$CASES BUDGETS=$BUDGETS${CONF_TINY:+ CONF_TINY=$CONF_TINY}${REFCHECK:+ REFCHECK=$REFCHECK}"
    python3 -c 'import pynvml' 2>/dev/null && echo "pynvml: yes (5 ms NVML samples)" || echo "pynvml: NO (peaks from torch.cuda.max_memory_reserved)"
    if [ -n "$TINY" ] || [[ " $CASES " == *" jax"* ]]; then
        "$JAX_PYTHON" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__)' 2>&1 | tail -1
    fi
    echo "CONF_AUTOTUNE=${CONF_AUTOTUNE:-fixed} CONF_COMPILE_CACHE=${CONF_COMPILE_CACHE:-fresh}"
} >"$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

finish() {
    python3 bench/conformance/report.py "$LOGS" --json "$OUT/conformance.json" >"$OUT/conformance.md" \
        2>>"$LOGS/report.err"
    tar -C "$(dirname "$LOGS")" -czf "$OUT/conformance-logs.tar.gz" "$(basename "$LOGS")" 2>/dev/null
}

# --- the shim, as bench/run.sh builds it (SETUP=0 with .devdeps/ where the headers
# are missing); ft-run injects libflextensor-nvtx.so when it lies beside the shim
MK=()
if [ ! -f /usr/include/ini.h ] && [ -d .devdeps ]; then
    MK=(SETUP=0 INIH_LIB="$PWD/.devdeps/libinih.a" CFLAGS="-O2 -g -I$PWD/.devdeps/include")
fi
t0=$SECONDS
# ft-trace too: a case run again under FT_TRACE_FILE is read with it on the machine.
if ! make -j"$(nproc)" "${MK[@]}" build/libflextensor.so build/libflextensor-nvtx.so build/bin/ft-run \
        build/bin/ft-trace >"$LOGS/build.log" 2>&1; then
    echo "conformance: build failed" >&2
    tail -30 "$LOGS/build.log" >&2
    { echo "# FlexTensor conformance: the build failed"; echo; echo '```'; tail -30 "$LOGS/build.log"; echo '```'; } \
        >"$OUT/conformance.md"
    tar -C "$(dirname "$LOGS")" -czf "$OUT/conformance-logs.tar.gz" "$(basename "$LOGS")" 2>/dev/null
    exit 1
fi
echo "build: $((SECONDS - t0)) s"
FTRUN=$PWD/build/bin/ft-run
: >"$LOGS/runs.tsv"

# --- CONF_TINY: every case once, without FlexTensor: each case's Python path
# (transformers' APIs included) in one start-up (cases.py all), the compiled cases in a
# second (their compilation), each JAX case in its own (XLA's allocator is set per
# process), before the pipeline below
# smoke NAME TIMEOUT CMD...: one smoke process, its JSON lines summed up in smoke.txt
smoke() {
    local name=$1 tmo=$2 rc t0=$SECONDS
    shift 2
    CONF_T0=$(date +%s.%N) timeout -k 10 "$tmo" "$@" --json "$LOGS/smoke-$name.json" \
        >"$LOGS/smoke-$name.log" 2>&1
    rc=$?
    echo "smoke $name (no FlexTensor): rc $rc, $((SECONDS - t0)) s"
    python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("skipped"):
        s = "skipped: " + str(r["skipped"])
    elif "ok" in r:
        s = "ok" if r["ok"] else "FAIL " + str(r.get("error"))
    else:
        s = "FAIL " + str(r["error"]) if r.get("error") else "ok"
    print("  %-22s %s" % (r.get("case"), s))' "$LOGS/smoke-$name.json" 2>/dev/null | tee -a "$LOGS/smoke.txt"
    if [ "$rc" -ne 0 ]; then
        echo "  ($name: exit status $rc)" | tee -a "$LOGS/smoke.txt"
        tail -20 "$LOGS/smoke-$name.log"
    fi
    return 0
}
if [ -n "$TINY" ]; then
    : >"$LOGS/smoke.txt"
    smoke all "$PROC_TIMEOUT" python3 "$PY" all --out "$WORK/smoke.pt"
    read -r -a cenv <<<"$(compile_env all_compiled smoke)"
    smoke compiled "$(proc_timeout all_compiled)" ${cenv[@]+"${cenv[@]}"} python3 "$PY" all_compiled --out "$WORK/smoke.pt"
    for c in jax jax_prealloc; do
        smoke "$c" "$(proc_timeout "$c")" "$JAX_PYTHON" "$JAXPY" "$c" --out "$WORK/smoke-$c.npz"
    done
fi

# A byte count as --gpu-mem's argument, rounded down to a whole MiB (KiB for a tiny
# model), and the bytes that argument means.
size_arg() {
    if [ "$1" -ge $((64 << 20)) ]; then echo "$(($1 >> 20))MiB $((($1 >> 20) << 20))"
    else local k=$(($1 >> 10)); [ "$k" -lt 1 ] && k=1; echo "${k}KiB $((k << 10))"; fi
}

# run_one CASE KIND K BUDGET_BYTES: one process (KIND ref, ref2 or ft), a line in
# runs.tsv, the table rewritten
run_one() {
    local case=$1 kind=$2 k=$3 budget=$4 tag left tmo rc t0 ext arg=() cenv=()
    if [ "$kind" = ft ]; then tag=$case-k$k; else tag=$case-$kind; fi
    left=$((DEADLINE - (SECONDS - T_START)))
    if [ "$left" -lt 30 ]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$kind" "$k" "$budget" skip 0 "$tag" >>"$LOGS/runs.tsv"
        echo "[$((SECONDS - T_START)) s] $tag: skipped, $left s left before DEADLINE"
        return
    fi
    tmo=$(proc_timeout "$case")
    [ "$left" -lt "$tmo" ] && tmo=$left
    ext=$(out_ext "$case")
    set_case_cmd "$case"
    local cmd=("${CASE_CMD[@]}" "$case" --out "$WORK/$tag$ext" --json "$LOGS/$tag.json")
    [ -n "${CONF_STEPS:-}" ] && cmd+=(--steps "$CONF_STEPS")
    if [ "$kind" = ref ]; then cmd+=(--h2d); else cmd+=(--ref "$WORK/$case-ref$ext"); fi
    if [ "$kind" = ft ]; then
        read -r -a arg <<<"$(size_arg "$budget")"
        budget=${arg[1]}
        cmd=("$FTRUN" --gpu-mem "${arg[0]}" "${cmd[@]}")
    fi
    read -r -a cenv <<<"$(compile_env "$case" "$tag")"
    cmd=(${cenv[@]+"${cenv[@]}"} "${cmd[@]}")
    rm -f "$WORK/$tag$ext" "$LOGS/$tag.json"
    t0=$SECONDS
    echo "${cmd[*]}" >"$LOGS/$tag.log"
    CONF_T0=$(date +%s.%N) timeout -k 10 "$tmo" "${cmd[@]}" >>"$LOGS/$tag.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$kind" "$k" "$budget" "$rc" "$((SECONDS - t0))" "$tag" \
        >>"$LOGS/runs.tsv"
    echo "[$((SECONDS - T_START)) s] $tag: rc $rc, $((SECONDS - t0)) s$( [ "$kind" = ft ] && echo ", --gpu-mem ${arg[0]}")"
    finish
}

for case in $CASES; do
    ext=$(out_ext "$case")
    rm -f "$WORK/$case-ref$ext"
    run_one "$case" ref - 0
    weights=$(python3 -c 'import json, sys
try:
    print(int(json.loads(open(sys.argv[1]).read().splitlines()[-1])["weights_bytes"]))
except Exception:
    print(0)' "$LOGS/$case-ref.json" 2>/dev/null)
    [ -n "${REFCHECK:-}" ] && run_one "$case" ref2 - 0
    for k in $BUDGETS; do
        if [ "${weights:-0}" -gt 0 ] && [ -f "$WORK/$case-ref$ext" ]; then
            run_one "$case" ft "$k" $((weights / k))
        else
            # no reference (it failed, was skipped for time, or had no jax): nothing
            # to size the budget by or compare with
            why=noref
            [ $((DEADLINE - (SECONDS - T_START))) -lt 30 ] && why=skip
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" ft "$k" 0 "$why" 0 "$case-k$k" >>"$LOGS/runs.tsv"
        fi
    done
done
finish
echo
cat "$OUT/conformance.md"
echo "(logs: $LOGS, in $OUT/conformance-logs.tar.gz; outputs and checkpoints: $WORK; $((SECONDS - T_START)) s)"
