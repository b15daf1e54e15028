#!/usr/bin/env bash
# bench/offload.sh: the offload benchmark on the GPU machine (bench/offload_bench.py).
# A Llama of LAYERS layers (default 32: about 13 GB of bf16 weights, random, no
# download) run all resident (plain), under FlexTensor with FT_GPU_MEM_LIMIT=$BUDGET
# and FT_SPILL=0 (shim: the model loads whole, the budget holds from the plan on), with
# FT_SPILL=1 (spill, the default: it holds from the first allocation), and with
# accelerate's CPU offload at the same budget (accelerate); decode
# step, prefill and greedy generate. Needs build/libflextensor.so (make it first, or
# run bench/run.sh). Logs and small files go flat under $OUT, the large outputs under
# /tmp/ft_offload/; a short table is printed last and written to $OUT/offload-summary.txt.
#
#   OUT=/some/dir bash bench/offload.sh
#   BUDGET=4.5GiB LAYERS=32 HIDDEN=4096 bash bench/offload.sh      (the defaults)
#
# The weights are made once (offload_bench.py make) into /dev/shm when it has room,
# else /tmp/ft_offload/, and reused while the file exists (WEIGHTS overrides the path).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LAYERS=${LAYERS:-32}
HIDDEN=${HIDDEN:-4096}
BUDGET=${BUDGET:-4.5GiB}
SHIM=$PWD/build/libflextensor.so
BIG=/tmp/ft_offload
mkdir -p "$BIG"
B=bench/offload_bench.py

if [ ! -f "$SHIM" ]; then
    echo "offload.sh: $SHIM missing; build it first (make build/libflextensor.so)" >&2
    exit 1
fi

# FT_GPU_MEM_LIMIT's size syntax, to bytes (for accelerate's max_memory and the table)
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
) || { echo "offload.sh: cannot read BUDGET=$BUDGET (e.g. 4.5GiB, 4608MiB)" >&2; exit 1; }
BUDGET_GIB=$(awk -v b="$budget_bytes" 'BEGIN { printf "%.6f", b / 1073741824 }')

# weights: about 25 * HIDDEN^2 bytes per layer plus embeddings and head; /dev/shm if
# it holds that with 2 GiB to spare (a container's /dev/shm is often small)
need_mib=$(( (LAYERS * 25 * HIDDEN * HIDDEN + 4 * 32000 * HIDDEN) / 1048576 + 2048 ))
shm_mib=$(df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
if [ -z "${WEIGHTS:-}" ]; then
    if [ -f "/dev/shm/ft_bench_weights_L${LAYERS}_H${HIDDEN}.pt" ] || [ "${shm_mib:-0}" -ge "$need_mib" ]; then
        WEIGHTS=/dev/shm/ft_bench_weights_L${LAYERS}_H${HIDDEN}.pt
    else
        WEIGHTS=$BIG/ft_bench_weights_L${LAYERS}_H${HIDDEN}.pt
    fi
fi
COMMON=(--layers "$LAYERS" --hidden "$HIDDEN" --weights "$WEIGHTS" --budget-gib "$BUDGET_GIB")

# this run's files only
rm -f "$OUT"/offload-*.json "$OUT"/offload-*.log "$OUT"/offload-*.csv "$OUT"/offload-*.txt \
    "$OUT/offload-trace.bin"

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "accelerate", accelerate.__version__)' 2>&1
    echo "LAYERS=$LAYERS HIDDEN=$HIDDEN BUDGET=$BUDGET ($budget_bytes bytes) WEIGHTS=$WEIGHTS"
    echo "git $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed file(s)"
} >"$OUT/offload-env.txt" 2>&1
cat "$OUT/offload-env.txt"
idle_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')

# device memory sampled from outside every 200 ms: per process, and the whole GPU
SMI_PIDS=()
smi_start() {  # $1: file name suffix
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 200 \
        >"$OUT/offload-smi$1.csv" 2>/dev/null &
    SMI_PIDS=($!)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
        >"$OUT/offload-smi-gpu$1.csv" 2>/dev/null &
    SMI_PIDS+=($!)
    sleep 0.5
}
smi_stop() {
    sleep 0.5
    kill "${SMI_PIDS[@]}" 2>/dev/null
    wait "${SMI_PIDS[@]}" 2>/dev/null
    SMI_PIDS=()
}

# --- 0. the weights, once
t0=$SECONDS
if [ -f "$WEIGHTS" ]; then
    echo "weights: $WEIGHTS exists, reused"
else
    echo "weights: making $WEIGHTS"
    timeout 300 python3 $B make "$OUT/offload-make.json" "${COMMON[@]}" >"$OUT/offload-make.log" 2>&1
    rc=$?
    tail -1 "$OUT/offload-make.log"
    if [ $rc -ne 0 ] || [ ! -f "$WEIGHTS" ]; then
        echo "offload.sh: make failed (rc $rc), see offload-make.log" >&2
        tail -20 "$OUT/offload-make.log" >&2
        exit 1
    fi
fi
echo "weights ready after $((SECONDS - t0)) s"

# MODES (default "plain shim accelerate") picks the runs; a run left out reuses the
# results a previous call on the same machine kept in $BIG (the device machine stays
# warm between calls, $OUT does not keep its files).
MODES=${MODES:-plain shim accelerate}   # also: overhead, spill, ab
want() { case " $MODES " in *" $1 "*) rm -f "$BIG/offload-$1.pt"; return 0 ;; esac
         cp "$BIG"/offload-"$1"* "$BIG"/offload-smi"${2:-}".csv "$OUT"/ 2>/dev/null; return 1; }
keep() { cp "$OUT"/offload-"$1"* "$OUT"/offload-smi"${2:-}".csv "$BIG"/ 2>/dev/null; }
rc_plain=0; rc_shim=0; rc_acc=0

# --- 1. all resident
if want plain -plain; then
t0=$SECONDS
smi_start -plain
timeout 300 python3 $B plain "$OUT/offload-plain.json" "${COMMON[@]}" \
    --tensors "$BIG/offload-plain.pt" >"$OUT/offload-plain.log" 2>&1
rc_plain=$?
smi_stop
echo "plain: rc $rc_plain, $((SECONDS - t0)) s"
keep plain -plain
fi

# --- 2. FlexTensor at the budget
if want shim; then
t0=$SECONDS
smi_start ""
timeout 400 env FT_SPILL=0 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_GPU_MEM_LIMIT="$BUDGET" \
    FT_LOG_DIAGNOSTICS=1 FT_TRACE_FILE="$OUT/offload-trace.bin" LD_PRELOAD="$SHIM" \
    python3 $B shim "$OUT/offload-shim.json" "${COMMON[@]}" \
    --tensors "$BIG/offload-shim.pt" >"$OUT/offload-shim.log" 2>&1
rc_shim=$?
smi_stop
echo "shim: rc $rc_shim, $((SECONDS - t0)) s"
if [ -x build/bin/ft-trace ] && [ -f "$OUT/offload-trace.bin" ]; then
    build/bin/ft-trace "$OUT/offload-trace.bin" >"$OUT/offload-trace.txt" 2>&1
fi
keep shim
cp "$OUT"/offload-trace* "$BIG"/ 2>/dev/null
fi

# --- 2b. overhead: FlexTensor enabled with a budget above the model (the plan streams
# nothing, the engine stays off): its cost against the all-resident run
if want overhead; then
t0=$SECONDS
timeout 300 env FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_GPU_MEM_LIMIT=120GiB \
    LD_PRELOAD="$SHIM" python3 $B shim "$OUT/offload-overhead.json" "${COMMON[@]}" --no-generate \
    --tensors "$BIG/offload-overhead.pt" >"$OUT/offload-overhead.log" 2>&1
echo "overhead: rc $?, $((SECONDS - t0)) s"
keep overhead
fi

# --- 2b'. ab: the overhead judged within one call. Separate processes' decode steps
# differ by tens of percent (launch-bound, host noise), so all-resident runs and
# FT_ENABLED=1 runs with a budget above the model alternate, AB_ROUNDS times; the
# summary gives each round's ratio and their median.
if want ab; then
t0=$SECONDS
rm -f "$OUT"/offload-ab-*.json
for ((r = 1; r <= ${AB_ROUNDS:-3}; r++)); do
    timeout 300 python3 $B plain "$OUT/offload-ab-plain-$r.json" "${COMMON[@]}" --no-generate \
        --iters 20 --tensors "$BIG/offload-ab.pt" >"$OUT/offload-ab-plain-$r.log" 2>&1
    timeout 300 env FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_GPU_MEM_LIMIT=120GiB \
        LD_PRELOAD="$SHIM" python3 $B shim "$OUT/offload-ab-shim-$r.json" "${COMMON[@]}" --no-generate \
        --iters 20 --tensors "$BIG/offload-ab.pt" >"$OUT/offload-ab-shim-$r.log" 2>&1
done
echo "ab: ${AB_ROUNDS:-3} rounds, $((SECONDS - t0)) s"
keep ab
fi

# --- 2c. FT_SPILL=1: the budget holds from the first allocation (the weights past it
# are loaded into host memory), the same workload otherwise
if want spill -spill; then
t0=$SECONDS
smi_start -spill
timeout 400 env FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 \
    FT_GPU_MEM_LIMIT="$BUDGET" FT_LOG_DIAGNOSTICS=1 LD_PRELOAD="$SHIM" \
    python3 $B shim "$OUT/offload-spill.json" "${COMMON[@]}" \
    --tensors "$BIG/offload-spill.pt" >"$OUT/offload-spill.log" 2>&1
echo "spill: rc $?, $((SECONDS - t0)) s"
smi_stop
keep spill -spill
fi

# --- 3. accelerate's CPU offload at the same budget (fewer iterations, no generate)
if want accelerate -accelerate; then
t0=$SECONDS
smi_start -accelerate
timeout 500 python3 $B accelerate "$OUT/offload-accelerate.json" "${COMMON[@]}" \
    --iters 3 --warmup 1 --no-generate \
    --tensors "$BIG/offload-accelerate.pt" >"$OUT/offload-accelerate.log" 2>&1
rc_acc=$?
smi_stop
echo "accelerate: rc $rc_acc, $((SECONDS - t0)) s"
keep accelerate -accelerate
fi

# --- 4. outputs: shim = plain bitwise; accelerate against plain, max |diff|
python3 - "$BIG" >"$OUT/offload-compare.txt" 2>&1 <<'PY'
import json, os, sys
import torch

def load(mode):
    p = os.path.join(sys.argv[1], f"offload-{mode}.pt")
    return torch.load(p, weights_only=True) if os.path.exists(p) else None

plain, shim, acc, spill = load("plain"), load("shim"), load("accelerate"), load("spill")
r = {}
for name, o in (("shim", shim), ("accelerate", acc), ("spill", spill)):
    if plain is None or o is None:
        continue
    for k in ("decode_logits", "prefill_logits"):
        a, b = plain[k], o[k]
        same_shape = a is not None and b is not None and a.shape == b.shape
        r[f"{name}_{k}_equal"] = bool(same_shape and torch.equal(a, b))
        r[f"{name}_{k}_maxabs"] = float((a - b).abs().max()) if same_shape else None
    ta, tb = plain["tokens"], o["tokens"]
    r[f"{name}_tokens_equal"] = None if ta is None or tb is None else ta == tb
    if ta is not None and tb is not None:
        r[f"{name}_tokens_same_prefix"] = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y),
                                               min(len(ta), len(tb)))
print(json.dumps(r))
PY
cat "$OUT/offload-compare.txt"

# --- 5. the table
python3 - "$OUT" "$budget_bytes" "$BUDGET" "${idle_mib:-}" "$rc_plain" "$rc_shim" "$rc_acc" \
    >"$OUT/offload-summary.txt" 2>&1 <<'PY'
import glob, json, os, re, sys

out, budget_b, budget_s, idle = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rcs = dict(zip(("plain", "shim", "accelerate"), sys.argv[5:8]))
budget_mib = budget_b / 1048576

def last_json(path):
    try:
        lines = [l for l in open(path) if l.strip().startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}

def text(path):
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""

def smi_max(path):
    """max used MiB over the numeric lines of an nvidia-smi csv (last column)."""
    best = None
    for line in text(path).splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            v = int(f[-1])
        except ValueError:
            continue
        best = v if best is None else max(best, v)
    return best

J = {m: last_json(os.path.join(out, f"offload-{m}.json"))
     for m in ("plain", "shim", "accelerate", "overhead", "spill")}
cmp = last_json(os.path.join(out, "offload-compare.txt"))
# FlexTensor's column: the shim run (FT_SPILL=0), else the default (FT_SPILL=1) run
FT = "shim" if J["shim"] or not J["spill"] else "spill"
log = text(os.path.join(out, f"offload-{FT}.log"))

# the link: pinned 1 GiB copies timed in the all-resident run; else the shim's figure
m = re.search(r"host to device ([0-9.]+) GB/s", log)
h2d_shim = float(m.group(1)) if m else None
h2d = J["plain"].get("h2d_gbps") or h2d_shim
h2d_src = "1 GiB copies, all-resident run" if J["plain"].get("h2d_gbps") else "no figure of the all-resident run"
plan = re.findall(r"resident ([0-9.]+) MiB, streamed ([0-9.]+) MiB through ([0-9]+) slots x "
                  r"([0-9.]+) MiB, device ([0-9.]+) MiB \(other ([0-9.]+) MiB\)", log)
streamed = float(plan[-1][1]) if plan else None
link = streamed * 1048576 / (h2d * 1e9) * 1000 if streamed is not None and h2d else None

def f(x, p=1):
    return "-" if x is None else f"{x:.{p}f}"

def ratio(a, b):
    return a / b if a is not None and b else None

mib = lambda x: None if x is None else x / 1048576
rows, lines, notes = [], [], []
hdr = ("", "all-resident", "FlexTensor", "link bound", "max(res,link)", "FT/max", "<=1.10",
       "accelerate", "acc/FT", ">=5")
def streamed_after(step):
    """MiB streamed per pass once `step` ran (ft_get_gpu_memory_usage: streamed units in
    host memory plus those loaded): more than the plan's when that step's activations
    made resident units stream."""
    u = J[FT].get(f"ft_usage_after_{step}")
    return (u["unmapped"] + u["slots"]) / 1048576 if u else None

for name, key, passes, target, step in (("decode 1x1 ms", "decode_ms_median", 1, True, "decode"),
                                        ("prefill 8x512 ms", "prefill_ms_median", 1, False, "prefill"),
                                        ("generate 32 tok ms", "generate_ms", 32, False, None)):
    res, ft, acc = J["plain"].get(key), J[FT].get(key), J["accelerate"].get(key)
    st = streamed_after(step) if step else None
    lb = link * passes if link is not None else None
    if st is not None and streamed and h2d and st > streamed + 1:
        lb = st * 1048576 / (h2d * 1e9) * 1000 * passes
        notes.append(f"{name}: link bound from {st:.0f} MiB streamed per pass after it (the plan "
                     f"streamed {streamed:.0f}; its activations made more units stream)")
    floor = max(x for x in (res, lb) if x is not None) if res is not None or lb is not None else None
    r1, r2 = ratio(ft, floor), ratio(acc, ft)
    ok1 = "-" if r1 is None else ("ok" if r1 <= 1.10 else "MISS")
    ok2 = "-" if r2 is None or not target else ("ok" if r2 >= 5 else "MISS")
    if key == "generate_ms":
        ok1 = "info" if r1 is not None else "-"
    rows.append((name, f(res), f(ft), f(lb), f(floor), f(r1, 3), ok1, f(acc), f(r2, 2), ok2))
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
fmt = lambda r: "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(r))

p = J["plain"] or J[FT]
lines.append(f"== FlexTensor offload: Llama {p.get('layers', '?')} layers, hidden {p.get('hidden', '?')}, "
             f"{f((p.get('param_bytes') or 0) / 1e9, 2)} GB bf16 weights, budget {budget_s} "
             f"({budget_mib:.0f} MiB); {p.get('device', '?')}")
lines.append(fmt(hdr))
lines += [fmt(r) for r in rows] + notes
if plan:
    r_, s_, n_, sl_, d_, o_ = plan[-1]
    lines.append(f"link: host to device {f(h2d)} GB/s ({h2d_src}; the shim "
                 f"measured {f(h2d_shim)}); plan: resident {r_} MiB, streamed {s_} MiB "
                 f"per pass through {n_} slots x {sl_} MiB, device {d_} MiB (other {o_} MiB)")
else:
    lines.append(f"link: host to device {f(h2d)} GB/s (the shim measured {f(h2d_shim)}); no plan line in offload-shim.log")
lines.append(f"decode min ms: all-resident {f(J['plain'].get('decode_ms_min'))}, "
             f"FlexTensor ({FT}) {f(J[FT].get('decode_ms_min'))}, "
             f"accelerate {f(J['accelerate'].get('decode_ms_min'))}")

def b(k):
    v = cmp.get(k)
    return "-" if v is None else str(v)
lines.append(f"bitwise {FT} = plain: decode {b(FT + '_decode_logits_equal')}, prefill "
             f"{b(FT + '_prefill_logits_equal')}, generate {b(FT + '_tokens_equal')} "
             f"({J[FT].get('generate_tokens', '-')} tokens); every forward equal the first: "
             f"decode {J[FT].get('decode_iterations_equal', '-')}, prefill "
             f"{J[FT].get('prefill_iterations_equal', '-')}")
lines.append(f"accelerate vs plain (not required equal): max |diff| decode "
             f"{b('accelerate_decode_logits_maxabs')}, prefill {b('accelerate_prefill_logits_maxabs')}")
am, ab = J["accelerate"].get("accelerate_modules") or {}, J["accelerate"].get("accelerate_bytes") or {}
lines.append(f"accelerate device map: {am.get('gpu', '-')} module(s) on the GPU "
             f"({f(mib(ab.get('gpu')), 0)} MiB), {am.get('cpu', '-')} on the cpu "
             f"({f(mib(ab.get('cpu')), 0)} MiB), copied in at each forward")

def peak(tag):
    proc = smi_max(os.path.join(out, f"offload-smi{tag}.csv"))
    gpu = smi_max(os.path.join(out, f"offload-smi-gpu{tag}.csv"))
    gpu = gpu - int(idle) if gpu is not None and idle.isdigit() else None
    return proc, gpu
ps, gs = peak("" if FT == "shim" else "-spill")
ctx = max((v for v in (J[FT].get("context_mib"), J[FT].get("outside_mib")) if v is not None),
          default=None)
# issue 5: the peak within the budget plus the context (and library code) held outside it
verdict = "-" if ps is None or ctx is None else ("within" if ps <= budget_mib + ctx else "OVER")
lines.append(f"peak device memory, nvidia-smi every 200 ms (MiB): FlexTensor {f(ps, 0)} vs budget "
             f"{budget_mib:.0f} + outside ({verdict}; GPU-wide less idle {f(gs, 0)}); context and library "
             f"code outside the budget {f(ctx, 0)} (the larger of before the weights and at the end)")
for tag, name in (("-plain", "all-resident"), ("-accelerate", "accelerate")):
    pp, gg = peak(tag)
    lines.append(f"  {name}: {f(pp, 0)} (GPU-wide less idle {f(gg, 0)})")
lines.append("torch max_memory_allocated (MiB): " + ", ".join(
    f"{m} {f(mib(J[m].get('max_memory_allocated')), 0)}" for m in ("plain", FT, "accelerate")))
u = J[FT].get("ft_usage_after_decode") or J[FT].get("ft_usage")
if u:
    lines.append("ft_get_gpu_memory_usage (MiB): " + ", ".join(f"{k} {v / 1048576:.0f}" for k, v in u.items()))
for l in log.splitlines():
    if (l.startswith("flextensor: residency:") or l.startswith("flextensor: plan (") or
            l.startswith("flextensor: device memory outside")) and \
            ": miss on " not in l and "loads nothing" not in l:
        lines.append("  " + l)
# How passes were followed after discovery (ft-trace's TRACKING line): no start means no
# profiling and no plan.
for l in text(os.path.join(out, "offload-trace.txt")).splitlines():
    if l.startswith("  passes after") or l.startswith("  warning "):
        lines.append("  trace:" + l[1:])
ab = {}
for path in sorted(glob.glob(os.path.join(out, "offload-ab-*-*.json"))):
    side, rnd = os.path.basename(path)[len("offload-ab-"):-len(".json")].split("-")
    ab.setdefault(int(rnd), {})[side] = last_json(path)
for key, name in (("decode_ms_median", "decode"), ("prefill_ms_median", "prefill")):
    ratios = [100 * (v["shim"][key] - v["plain"][key]) / v["plain"][key] for _, v in sorted(ab.items())
              if v.get("shim", {}).get(key) and v.get("plain", {}).get(key)]
    if ratios:
        med = sorted(ratios)[len(ratios) // 2]
        lines.append(f"overhead A/B ({len(ratios)} rounds, all resident then FT_ENABLED=1 above the "
                     f"model): {name} " + ", ".join(f"{x:+.1f}%" for x in ratios) +
                     f" (median {med:+.1f}%, target < 2%)")
for key, name in (("decode_ms_median", "decode"), ("prefill_ms_median", "prefill")):
    o, pl = J["overhead"].get(key), J["plain"].get(key)
    if o is not None and pl:
        lines.append(f"overhead, FT_ENABLED=1 with a budget above the model: {name} {o:.2f} ms against "
                     f"{pl:.2f} ms all resident ({100 * (o - pl) / pl:+.1f}%, target < 2%)")
if J["spill"]:
    sp, _ = peak("-spill")
    sl = text(os.path.join(out, "offload-spill.log"))
    lines.append(f"FT_SPILL=1: decode {f(J['spill'].get('decode_ms_median'))} ms, prefill "
                 f"{f(J['spill'].get('prefill_ms_median'))} ms; bitwise = plain: decode "
                 f"{b('spill_decode_logits_equal')}, prefill {b('spill_prefill_logits_equal')}, "
                 f"generate {b('spill_tokens_equal')}; peak {f(sp, 0)} MiB (nvidia-smi, "
                 f"context included) vs budget {budget_mib:.0f}")
    us = J["spill"].get("ft_usage")
    if us:
        lines.append("  FT_SPILL ft_get_gpu_memory_usage at exit (MiB): " +
                     ", ".join(f"{k} {v / 1048576:.0f}" for k, v in us.items()))
    for l in sl.splitlines():
        if l.startswith(("flextensor: residency:", "flextensor: spill", "flextensor: device memory outside")):
            lines.append("  [spill] " + l[:220])
nw = sum(1 for l in log.splitlines() if l.startswith("flextensor: warning:"))
ne = sum(1 for l in log.splitlines() if l.startswith("flextensor: error:"))
lines.append(f"shim log: {nw} warning(s), {ne} error(s); exit codes: " +
             ", ".join(f"{k} {v}" for k, v in rcs.items()))
print("\n".join(lines))
PY
echo
cat "$OUT/offload-summary.txt"
echo "(logs: $OUT, large outputs: $BIG)"
