#!/usr/bin/env bash
# bench/tp.sh: FlexTensor under a tensor-parallel PyTorch job (bench/tp_bench.py), one
# process per GPU started by torchrun, NCCL all-reduces between them. Runs the same job
# three ways and compares each rank's outputs bitwise with the run without the shim:
#
#   plain   torchrun --nproc-per-node $WORLD bench/tp_bench.py run ...
#   shim    the same under FT_SPILL=0 ft-run --gpu-mem $BUDGET (each process its own
#           budget, its own host store, on its own device; the model loads whole)
#   spill   shim with FT_SPILL=1 (the default): the budget holds from the first allocation
#
#   OUT=/some/dir bash bench/tp.sh          WORLD=2 LAYERS=32 HIDDEN=4096 BUDGET=3GiB
#   MODES="plain shim" bash bench/tp.sh     a subset (plain is the reference)
#
# Needs build/libflextensor.so and build/bin/ft-run. Each rank's log (the shim's report
# is on stderr) lands in $OUT/tp-R-MODE.log; a table is printed last and written to
# $OUT/tp-summary.txt. Weights are made once into /dev/shm (or /tmp/ft_tp) and reused.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
# NVLink multicast stays off (a shared host's GPUs can be put out of service by it)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
WORLD=${WORLD:-2}
LAYERS=${LAYERS:-32}
HIDDEN=${HIDDEN:-4096}
BUDGET=${BUDGET:-3GiB}
MODES=${MODES:-plain shim spill}
B=bench/tp_bench.py
BIG=/tmp/ft_tp
mkdir -p "$BIG"
for f in build/libflextensor.so build/bin/ft-run; do
    [ -f "$f" ] || { echo "tp.sh: $f missing; build it first" >&2; exit 1; }
done
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -lt "$WORLD" ]; then
    echo "tp.sh: WORLD=$WORLD needs $WORLD GPUs, nvidia-smi lists $ngpu" >&2
    exit 1
fi

need_mib=$(( (LAYERS * 25 * HIDDEN * HIDDEN + 4 * 32000 * HIDDEN * WORLD) / 1048576 + 2048 ))
shm_mib=$(df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
W=${WEIGHTS:-/dev/shm/ft_tp}
if [ -z "${WEIGHTS:-}" ] && [ ! -d /dev/shm/ft_tp ] && [ "${shm_mib:-0}" -lt "$need_mib" ]; then
    W=$BIG/weights
fi
COMMON=(--weights "$W" --layers "$LAYERS" --hidden "$HIDDEN")

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    nvidia-smi topo -m 2>/dev/null | head -4
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1
    echo "WORLD=$WORLD LAYERS=$LAYERS HIDDEN=$HIDDEN BUDGET=$BUDGET (per process) WEIGHTS=$W"
    echo "git $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed file(s)"
} >"$OUT/tp-env.txt" 2>&1
cat "$OUT/tp-env.txt"

if ls "$W"/tp-L"$LAYERS"-H"$HIDDEN"-w"$WORLD"-r*.pt >/dev/null 2>&1; then
    echo "weights: $W reused"
else
    t0=$SECONDS
    timeout 300 python3 $B make --world "$WORLD" "${COMMON[@]}" >"$OUT/tp-make.log" 2>&1 ||
        { echo "tp.sh: making the weights failed, see tp-make.log" >&2; tail -20 "$OUT/tp-make.log"; exit 1; }
    echo "weights: made in $((SECONDS - t0)) s"
fi

# device memory of every GPU from outside, every 200 ms, with a timestamp
SMI=
smi_start() {
    nvidia-smi --query-gpu=timestamp,index,memory.used --format=csv,noheader,nounits -lms 200 \
        >"$OUT/tp-smi-$1.csv" 2>/dev/null &
    SMI=$!
    sleep 0.5
}
smi_stop() { sleep 0.5; kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null; }
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >"$OUT/tp-idle.csv"

declare -A RC
for mode in $MODES; do
    rm -rf "$BIG/logs-$mode" "$OUT"/tp-*-"$mode".log "$BIG/$mode"-rank*.pt
    RUN=(python3 $B run "$BIG" "${COMMON[@]}" --tag "$mode")
    case $mode in
        plain) PRE=() ;;
        shim)  PRE=(env FT_SPILL=0 build/bin/ft-run --gpu-mem "$BUDGET" --trace "$OUT/tp-trace-shim-%p.bin") ;;
        spill) PRE=(env FT_SPILL=1 build/bin/ft-run --gpu-mem "$BUDGET") ;;
        *) echo "tp.sh: unknown mode $mode (plain, shim, spill)" >&2; continue ;;
    esac
    t0=$SECONDS
    smi_start "$mode"
    FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_LOG_DIAGNOSTICS=1 timeout 400 \
        torchrun --nproc-per-node "$WORLD" --log-dir "$BIG/logs-$mode" --redirects 3 \
        --no-python "${PRE[@]}" "${RUN[@]}" >"$OUT/tp-torchrun-$mode.log" 2>&1
    RC[$mode]=$?
    smi_stop
    for ((r = 0; r < WORLD; r++)); do
        for s in stdout stderr; do
            f=$(find "$BIG/logs-$mode" -path "*/attempt_0/$r/$s.log" 2>/dev/null | head -1)
            [ -n "$f" ] && cat "$f" >>"$OUT/tp-$r-$mode.log"
        done
        cp "$BIG/$mode-rank$r.json" "$OUT/" 2>/dev/null
    done
    echo "$mode: rc ${RC[$mode]}, $((SECONDS - t0)) s"
    [ "${RC[$mode]}" = 0 ] || tail -15 "$OUT/tp-torchrun-$mode.log"
done
for t in "$OUT"/tp-trace-shim-*.bin; do
    [ -f "$t" ] && build/bin/ft-trace "$t" >"${t%.bin}.txt" 2>&1
done

python3 - "$OUT" "$BIG" "$WORLD" "$BUDGET" <<'PY' | tee "$OUT/tp-summary.txt"
import datetime, json, os, re, sys
import torch

out, big, world, budget_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
m = re.fullmatch(r"([0-9.]+)\s*([KMGT]?)i?B?", budget_s.strip(), re.I)
budget_mib = float(m.group(1)) * {"": 1 / 1048576, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m.group(2).upper()]

def js(mode, r):
    try:
        return json.loads(open(os.path.join(out, f"{mode}-rank{r}.json")).read())
    except (OSError, ValueError):
        return {}

def text(p):
    try:
        return open(p, errors="replace").read()
    except OSError:
        return ""

def pt(mode, r):
    p = os.path.join(big, f"{mode}-rank{r}.pt")
    return torch.load(p, weights_only=True) if os.path.exists(p) else None

idle = {}
for line in text(os.path.join(out, "tp-idle.csv")).splitlines():
    i, v = [x.strip() for x in line.split(",")]
    idle[int(i)] = int(v)

def smi_peak(mode, gpu, since=None):
    best = None
    for line in text(os.path.join(out, f"tp-smi-{mode}.csv")).splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            ts = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            i, v = int(f[1]), int(f[2])
        except (ValueError, IndexError):
            continue
        if i != gpu or (since is not None and ts < since):
            continue
        best = v if best is None else max(best, v)
    return None if best is None else best - idle.get(gpu, 0)

f = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"
P = {r: js("plain", r) for r in range(world)}
lines = [f"== FlexTensor under torchrun, {world} processes (tensor parallel, NCCL), "
         f"{P[0].get('layers', '?')} layers, hidden {P[0].get('hidden', '?')}, budget {budget_s} per process"]
hdr = ("rank", "mode", "shard GB", "decode ms", "prefill ms", "link ms", "dec/max", "pre/max",
       "equal d/p/gen", "ctx MiB", "peak MiB", "steady MiB", "5ms peak", "FT max", "within")
rows = []
for mode in ("plain", "shim", "spill"):
    for r in range(world):
        j = js(mode, r)
        if not j:
            continue
        log = text(os.path.join(out, f"tp-{r}-{mode}.log"))
        h2d = re.findall(r"host to device ([0-9.]+) GB/s", log)
        plan = re.findall(r"resident ([0-9.]+) MiB, streamed ([0-9.]+) MiB", log)
        # the link as all processes copy at once (the run without the shim), else the
        # figure the shim measured in this process alone
        gbps = P[r].get("h2d_gbps_concurrent") or (float(h2d[-1]) if h2d else None)
        link = float(plan[-1][1]) * 1048576 / (gbps * 1e9) * 1e3 if plan and gbps else None
        res_d, res_p = P[r].get("decode_ms_median"), P[r].get("prefill_ms_median")
        d, p = j.get("decode_ms_median"), j.get("prefill_ms_median")
        def ratio(x, res):
            floor = max(v for v in (res, link) if v is not None) if res or link else None
            return None if x is None or not floor else x / floor
        a, b = pt("plain", r), pt(mode, r)
        eq = "-" if a is None or b is None else "/".join(
            "yes" if (torch.equal(a[k], b[k]) if k != "tokens" else a[k] == b[k]) else "NO"
            for k in ("decode_logits", "prefill_logits", "tokens"))
        gpu = j.get("cuda_device", r)
        # outside the budget: the larger of the start's and the end's figure (modules
        # are loaded lazily, as kernels are first launched)
        ctx = max((v for v in (j.get("context_mib"), j.get("outside_mib")) if v is not None), default=None)
        peak, steady = smi_peak(mode, gpu), smi_peak(mode, gpu, j.get("steady_from"))
        # the 5 ms samples (NVML, the base ctx is measured on) judge when present;
        # nvidia-smi's 200 ms ones otherwise
        wpeak, ftmax = j.get("watch_peak_mib"), j.get("watch_ft_max_mib")
        within = "-"
        if mode != "plain" and ctx is not None:
            lim = budget_mib + ctx
            top = wpeak if wpeak is not None else peak
            within = ("yes" if top is not None and top <= lim else
                      "steady" if wpeak is None and steady is not None and steady <= lim else "NO")
        rows.append((r, mode, f((j.get("shard_bytes") or 0) / 1e9, 2), f(d), f(p), f(link),
                     f(ratio(d, res_d), 3) if mode != "plain" else "-",
                     f(ratio(p, res_p), 3) if mode != "plain" else "-", eq, f(ctx, 0),
                     f(peak, 0), f(steady, 0), f(wpeak, 0), f(ftmax, 0), within))
w = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(len(hdr))]
lines.append("  ".join(str(c).rjust(w[i]) for i, c in enumerate(hdr)))
lines += ["  ".join(str(c).rjust(w[i]) for i, c in enumerate(row)) for row in rows]
conc = [P[r].get("h2d_gbps_concurrent") for r in range(world)]
lines.append("link ms: the plan's streamed MiB / the host-to-device GB/s of 1 GiB pinned copies made "
             "by every process at once in the run without the shim (" +
             ", ".join("-" if g is None else f"{g:.1f}" for g in conc) +
             " GB/s), else what the shim measured in that process alone; dec/max, pre/max: step time / max(all-resident, link); ctx: device "
             "memory outside the budget (context, NCCL, library code), the larger of: before any "
             "weight, less PyTorch's reserved; at the end, less FlexTensor's held (or reserved); "
             "peak, steady: nvidia-smi every 200 ms (GPU less idle), the whole run or after the "
             "warm-up; 5ms peak: NVML every 5 ms in the process, as ctx; FT max: the most "
             "ft_get_gpu_memory_usage counted (before the plan too); within: the 5 ms peak (else "
             "nvidia-smi's) <= budget + ctx over the whole run (yes), or after the warm-up (steady)")
for mode in ("plain", "shim", "spill"):
    for r in range(world):
        j = js(mode, r)
        if j and "watch_peak_mib" in j:
            lines.append(f"watch [{mode} {r}] every {j['watch_every_ms']:.0f} ms ({j['watch_samples']} samples): "
                         f"peak {j['watch_peak_mib']} MiB in {j['watch_peak_phase']} (FlexTensor held "
                         f"{j.get('watch_peak_ft_mib')}); outside FlexTensor at most "
                         f"{j.get('watch_outside_max_mib')} MiB, in {j.get('watch_outside_phase')}")
for mode in ("shim", "spill"):
    for r in range(world):
        log = text(os.path.join(out, f"tp-{r}-{mode}.log"))
        for l in log.splitlines():
            if re.match(r"flextensor: (residency:|plan \(|error|warning|device memory outside)", l):
                lines.append(f"  [{mode} {r}] {l[:220]}")
print("\n".join(lines))
PY
echo "exit codes: $(for m in $MODES; do printf '%s %s ' "$m" "${RC[$m]:-}"; done)"
