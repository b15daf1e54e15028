#!/usr/bin/env bash
# bench/overhead.sh: FlexTensor's overhead when the budget holds the whole model (issue
# 5: under 2% of step time), judged on a host-bound decode step. A Llama of LAYERS
# layers (32: about 1400 launches per decode step, as the 13.5 GB model) but of width
# HIDDEN (1024: under 1 GB, quick to load) runs in separate processes, one per
# configuration, ROUNDS times in rotating order, every process pinned to the same
# cores (PIN) so that their thread placement differs less:
#   plain    no shim
#   off      shim preloaded, FT_ENABLED=0 (plain forwards)
#   on       FT_ENABLED=1, FT_GPU_MEM_LIMIT=120GiB: discovery, profiling, a plan that
#            streams nothing; the timed steps come after it
#   nocupti  as on, FT_CUPTI=off
#   first    as on, FT_CUPTI_CONFIRM=first-pass (CUPTI detached after discovery's first
#            pass: compare the warm-up steps, decode_warmup_ms in the JSON files)
#   novmm    as on, FT_VMM_MIN_SIZE=0: every allocation passes through to cudaMalloc
#            (nothing could be offloaded), which tells the wrappers' cost from that of
#            kernels reading memory the shim mapped
#   noarena  as on, FT_VMM_RESERVE=0: a reservation of its own for every allocation
#   ALT      as on, with the library ALT_SHIM (ALT_NAME) when set: another build
# With LOCKSTEP=1 a round's processes run at once instead, each on its own cores
# (PINS, default 3 cores each from core 2, rotated every round), and take their timed
# steps in turn (ftbench.Turns): one process's step, then the next one's, so that a
# round's ratios compare steps taken in the same seconds of the host's load.
# The table gives, per configuration, the median over rounds of each process's median
# and min decode ms, and the median of the per-round ratios to plain; "cpu" is the same
# ratio for the main thread's CPU time per step (time.thread_time: the host's work,
# less the time the thread was not running), which host noise moves less.
#
#   OUT=/some/dir [ROUNDS=5] [ITERS=100] [LOCKSTEP=1 [PINS="2-4 5-7"]] [CONFIGS="plain on"] [ALT_SHIM=/x/libflextensor.so ALT_NAME=old] \
#       bash bench/overhead.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# one CPU thread for PyTorch's own pools: the decode runs on the GPU, and a pool of 16
# on 3 pinned cores only adds noise
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
LAYERS=${LAYERS:-32}
HIDDEN=${HIDDEN:-1024}
ROUNDS=${ROUNDS:-5}
PIN=${PIN:-2-5}
SHIM=$PWD/build/libflextensor.so
B=bench/offload_bench.py
WEIGHTS=${WEIGHTS:-/tmp/ft_overhead_L${LAYERS}_H${HIDDEN}.pt}
ITERS=${ITERS:-100}
COMMON=(--layers "$LAYERS" --hidden "$HIDDEN" --weights "$WEIGHTS" --no-generate --warmup 8 --iters "$ITERS")
[ -f "$SHIM" ] || { echo "overhead.sh: $SHIM missing; build it first" >&2; exit 1; }
if [ -n "${ALT_SHIM:-}" ] && [ ! -f "$ALT_SHIM" ]; then
    echo "overhead.sh: ALT_SHIM=$ALT_SHIM not found" >&2
    exit 1
fi

if [ ! -f "$WEIGHTS" ]; then
    python3 $B make "$OUT/overhead-make.json" "${COMMON[@]}" >"$OUT/overhead-make.log" 2>&1 \
        || { echo "overhead.sh: make failed, see overhead-make.log" >&2; tail -5 "$OUT/overhead-make.log"; exit 1; }
fi

ON=(FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_GPU_MEM_LIMIT=120GiB)
read -r -a CONFIGS <<<"${CONFIGS:-plain off on nocupti}"
[ -n "${ALT_SHIM:-}" ] && CONFIGS+=("${ALT_NAME:-alt}")
run_one() { # config round [cores] [turns spec]
    local c=$1 r=$2 cores=${3:-$PIN} mode=shim
    local -a envs=() pin=() turns=()
    command -v taskset >/dev/null && [ -n "$cores" ] && pin=(taskset -c "$cores")
    [ -n "${4:-}" ] && turns=(--turns "$4")
    case $c in
    plain) mode=plain ;;
    off) envs=(FT_ENABLED=0 LD_PRELOAD="$SHIM") ;;
    on) envs=("${ON[@]}" LD_PRELOAD="$SHIM")
        [ "$r" = 1 ] && envs+=(FT_TRACE_FILE="$OUT/overhead-on-trace.bin") ;; # what discovery found
    nocupti) envs=("${ON[@]}" FT_CUPTI=off LD_PRELOAD="$SHIM") ;;
    first) envs=("${ON[@]}" FT_CUPTI_CONFIRM=first-pass LD_PRELOAD="$SHIM") ;;
    novmm) envs=("${ON[@]}" FT_VMM_MIN_SIZE=0 LD_PRELOAD="$SHIM") ;;
    noarena) envs=("${ON[@]}" FT_VMM_RESERVE=0 LD_PRELOAD="$SHIM") ;;
    *) envs=("${ON[@]}" LD_PRELOAD="$ALT_SHIM") ;;
    esac
    timeout 300 env "${envs[@]}" "${pin[@]}" python3 $B $mode "$OUT/overhead-$c-$r.json" "${COMMON[@]}" \
        --tensors "/tmp/ft_overhead_$c.pt" "${turns[@]}" >"$OUT/overhead-$c-$r.log" 2>&1 \
        || echo "overhead.sh: $c round $r failed (see overhead-$c-$r.log)"
}
# LOCKSTEP: one round's processes run at once, each on its own cores (PINS, rotated
# every round), and take their timed steps in turn (ftbench.Turns), the first turn
# rotating too; a round's ratios then compare steps from the same seconds.
lockstep_round() { # round
    local r=$1 dir i k
    dir=$(mktemp -d)
    for ((i = 0; i < n; i++)); do mkfifo "$dir/turn.$i"; done
    local -a pids=()
    for ((i = 0; i < n; i++)); do
        run_one "${CONFIGS[$i]}" "$r" "${PINS[$(((i + r) % n))]}" "$dir,$i,$n" &
        pids+=($!)
    done
    # the first turn once every process has finished its warm-up (or one has exited)
    for ((k = 0; k < 6000; k++)); do
        [ "$(ls "$dir" | grep -c '^ready\.')" -ge "$n" ] && break
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || break 2; done
        sleep 0.05
    done
    exec {tok}<>"$dir/turn.$((r % n))"
    printf t >&"$tok"
    wait "${pids[@]}"
    exec {tok}>&-
    rm -rf "$dir"
}
t0=$SECONDS
n=${#CONFIGS[@]}
if [ -n "${LOCKSTEP:-}" ]; then
    # default: 3 cores a process from core 2 on (a 16-core machine takes 4 configurations)
    [ -n "${PINS:-}" ] && read -r -a PINS <<<"$PINS" \
        || for ((i = 0; i < n; i++)); do PINS+=("$((2 + 3 * i))-$((4 + 3 * i))"); done
    [ "${#PINS[@]}" -ge "$n" ] || { echo "overhead.sh: PINS needs $n core sets" >&2; exit 1; }
fi
for ((r = 1; r <= ROUNDS; r++)); do
    if [ -n "${LOCKSTEP:-}" ]; then
        lockstep_round "$r"
    else
        for ((i = 0; i < n; i++)); do
            run_one "${CONFIGS[$(((i + r) % n))]}" "$r" # rotate: no configuration always runs first
        done
    fi
    echo "round $r of $ROUNDS done after $((SECONDS - t0)) s"
done

WHERE="one process at a time, cores ${PIN:-any}"
[ -n "${LOCKSTEP:-}" ] && WHERE="at once in lockstep, cores ${PINS[*]} (rotated)"
python3 - "$OUT" "$ROUNDS" "$LAYERS" "$HIDDEN" "$WHERE" "${CONFIGS[@]}" >"$OUT/overhead-summary.txt" <<'PY'
import json, os, statistics, sys
out, rounds, layers, hidden, pin, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def get(c, r):
    try:
        return json.load(open(os.path.join(out, f"overhead-{c}-{r}.json")))
    except (OSError, ValueError):
        return None
J = {c: [get(c, r) for r in range(1, rounds + 1)] for c in configs}
print(f"== FlexTensor overhead, budget above the model: Llama {layers} layers, hidden {hidden}, "
      f"{rounds} rounds, {pin}")
if "plain" not in J:
    sys.exit("overhead.sh: CONFIGS must include plain")
print(f"{'config':10} {'decode med':>10} {'decode min':>10} {'med vs plain (per round)':>26} "
      f"{'min vs plain':>12} {'best vs best':>12} {'cpu vs plain':>12} {'prefill med':>11} {'vs plain':>9} {'paired':>9}")
def ratios(c, key):
    rs = [j[key] / p[key] - 1 for j, p in zip(J[c], J["plain"]) if j and p and j.get(key) and p.get(key)]
    return rs
for c in configs:
    ok = [j for j in J[c] if j]
    if not ok:
        print(f"{c:10} (no run finished)")
        continue
    dm = statistics.median(j["decode_ms_median"] for j in ok)
    dn = statistics.median(j["decode_ms_min"] for j in ok)
    pm = statistics.median(j["prefill_ms_median"] for j in ok)
    rd, rp, rn = ratios(c, "decode_ms_median"), ratios(c, "prefill_ms_median"), ratios(c, "decode_ms_min")
    rc = ratios(c, "decode_cpu_ms_median")
    # lockstep: step k of this process ran next to step k of that round's plain one
    paired = [b / a - 1 for j, p in zip(J[c], J["plain"]) if j and p
              for a, b in zip(p["decode_ms"], j["decode_ms"])]
    each = " ".join(f"{x * 100:+.1f}" for x in rd)
    med = lambda rs: statistics.median(rs) * 100 if rs else 0.0
    plain_best = min((j["decode_ms_min"] for j in J["plain"] if j), default=None)
    best = (min(j["decode_ms_min"] for j in ok) / plain_best - 1) * 100 if plain_best else 0.0
    print(f"{c:10} {dm:10.2f} {dn:10.2f} {med(rd):+8.1f}% [{each}] {med(rn):+11.1f}% {best:+11.1f}%"
          f" {med(rc):+11.1f}% {pm:11.2f} {med(rp):+8.1f}% {med(paired):+8.1f}%")
import re
for c in configs:
    if c in ("plain", "off"):
        continue
    us, disc = [], []
    for r in range(1, rounds + 1):
        try:
            log = open(os.path.join(out, f"overhead-{c}-{r}.log")).read()
        except OSError:
            continue
        m = re.search(r"after a plan that streams nothing ([0-9.]+) us", log)
        if m:
            us.append(float(m.group(1)))
        m = re.search(r"per launch, the real call excluded .*?discovery ([0-9.]+) us", log)
        if m:
            disc.append(float(m.group(1)))
    warm = [sum(j["decode_warmup_ms"]) for j in (get(c, r) for r in range(1, rounds + 1))
            if j and j.get("decode_warmup_ms")]
    if warm:  # discovery's and profiling's forwards are among the warm-up ones
        print(f"{c}: warm-up forwards, total ms: median {statistics.median(warm):.1f} over {len(warm)} processes")
    if c == "first":  # did CUPTI detach after the first pass, and time profiling once attached again?
        logs = [open(os.path.join(out, f"overhead-{c}-{r}.log")).read() for r in range(1, rounds + 1)
                if os.path.exists(os.path.join(out, f"overhead-{c}-{r}.log"))]
        print(f"first: {sum('detached until profiling' in l for l in logs)} of {len(logs)} processes detached "
              f"CUPTI after the first pass; {sum('timed from CUPTI activity records' in l for l in logs)} timed "
              "profiling from CUPTI's records after attaching it again")
    if us:
        print(f"{c}: FlexTensor's own host time per launch (sampled in the process, exit report): "
              f"after the plan {statistics.median(us):.2f} us, discovery "
              f"{statistics.median(disc) if disc else float('nan'):.2f} us (medians over {len(us)} processes)")
steps = next((len(j["decode_ms"]) for j in J["plain"] if j), "?")
print(f"(decode: 1 token, batch 1, use_cache=False; prefill 8 x 512; ms, each process's median of {steps} "
      "and min; cpu: its main thread's CPU ms per step, median; paired: the median over all "
      "decode steps of step k's ratio to step k of that round's plain process (with LOCKSTEP, "
      "the step just before or after it). Ratios: the median over rounds of each process's median, and of its min, to that "
      "round's plain process; best: the fastest step of all its processes to plain's fastest)")
PY
if [ -f "$OUT/overhead-on-trace.bin" ] && [ -x build/bin/ft-trace ]; then
    build/bin/ft-trace "$OUT/overhead-on-trace.bin" >"$OUT/overhead-on-trace.txt" 2>&1
    grep -E '^  (launches|units|weights?) ' "$OUT/overhead-on-trace.txt" | sed 's/^/on, discovery: /' \
        >>"$OUT/overhead-summary.txt"
fi
cat "$OUT/overhead-summary.txt"
