#!/usr/bin/env bash
# bench/two_devices.sh: FlexTensor in one process that uses two GPUs (bench/two_devices.py:
# a Llama split between cuda:0 and cuda:1), managing cuda:0 under a budget below that
# half. One process on several GPUs is not supported yet: FlexTensor should stand down
# at the first allocation on cuda:1 and leave the program unchanged. Compares every
# forward's logits with a run without the shim and prints what FlexTensor said. run.sh
# runs it when the machine has two GPUs.
#
#   OUT=/some/dir [LAYERS=8] [HIDDEN=4096] [BUDGET=1200MiB] bash bench/two_devices.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
LAYERS=${LAYERS:-8}
HIDDEN=${HIDDEN:-4096}
BUDGET=${BUDGET:-1200MiB}
B=bench/two_devices.py
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 2 ] || { echo "two_devices.sh: needs 2 GPUs, nvidia-smi lists $ngpu" >&2; exit 1; }
[ -x build/bin/ft-run ] || { echo "two_devices.sh: build/bin/ft-run missing; build it first" >&2; exit 1; }
ARGS=(--layers "$LAYERS" --hidden "$HIDDEN" --iters 10)

python3 $B "$OUT/two-plain.pt" "${ARGS[@]}" >"$OUT/two-plain.log" 2>&1
rc_plain=$?
FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_LOG_LEVEL=info \
    build/bin/ft-run --gpu-mem "$BUDGET" -- python3 $B "$OUT/two-shim.pt" "${ARGS[@]}" >"$OUT/two-shim.log" 2>&1
rc_shim=$?
{
echo "== one process on two GPUs: Llama $LAYERS x $HIDDEN split in half, FlexTensor managing cuda:0 at $BUDGET"
echo "exit codes: plain $rc_plain, shim $rc_shim"
python3 - "$OUT" <<'PY'
import sys, torch
o = sys.argv[1]
try:
    a = torch.load(f"{o}/two-plain.pt"); b = torch.load(f"{o}/two-shim.pt")
    eq = [torch.equal(x, y) for x, y in zip(a, b)]
    print(f"logits shim = plain, per forward: {sum(eq)} of {len(eq)} bitwise equal")
except Exception as e:
    print(f"logits: cannot compare ({e})")
PY
grep -h '^{' "$OUT/two-plain.log" | sed 's/^/plain: /'
grep -h '^{' "$OUT/two-shim.log" | sed 's/^/shim: /'
grep -hE 'managing device|stands down|discovery: done|discovery: [0-9]+ iteration|plan \(|residency: [0-9]+ unit|residency: [0-9]+ load|host time in FlexTensor|one-time work' "$OUT/two-shim.log"
echo "content checks that failed: $(grep -c 'cannot read region' "$OUT/two-shim.log")"
echo "errors: $(grep -ciE 'illegal|error:|Traceback' "$OUT/two-shim.log")"
} | tee "$OUT/two-summary.txt"
