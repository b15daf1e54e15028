# Weights that exist only after the program's first launch, at default discovery
# settings (no FT_DISCOVERY_ITERS): weights initialised one by one by a kernel on the
# device right after each allocation (--init-kernel: PyTorch's uniform_ under
# `with torch.device("cuda")`, the init launches repeating per tensor on new memory),
# and weights copied in after unrelated kernels ran (--load-after-launch). Discovery
# finds the 6 layers as units holding every weight byte, a budget of about a third of
# the weights gives a plan that streams, and results are those of a run without the shim.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 6 --dim 512 --iters 12 --quiet)
FT_TRACE_BIN="$BUILD/bin/ft-trace"

for variant in init-kernel load-after-launch "init-kernel --threads 4" "load-after-launch --ptr-arrays"; do
    name=${variant// /_}
    # shellcheck disable=SC2086
    set -- --$variant
    sim "$MODEL" "${ARGS[@]}" "$@" >"$WORK/$name.plain" || fail "$variant: model without shim failed"
    # A layer is a 1 MiB weight and two 2 KiB vectors (the pointer-array variant adds a
    # 2 KiB vector and a 48-byte table): 6 MiB of weights, 2 MiB of device memory a unit
    # (whole granules); 5 MiB holds two slots and the activations, not the layers.
    FT_ENABLED=1 FT_LOG_LEVEL=info FT_GPU_MEM_LIMIT=5MiB FT_TRACE_FILE="$WORK/$name.bin" \
        shim "$MODEL" "${ARGS[@]}" "$@" >"$WORK/$name.shim" 2>"$WORK/$name.err" \
        || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "$variant: model under shim failed"; }
    cmp -s "$WORK/$name.plain" "$WORK/$name.shim" || fail "$variant: output differs under the shim"
    "$FT_TRACE_BIN" --json "$WORK/$name.bin" >"$WORK/$name.json" || fail "$variant: trace unreadable"
    python3 - "$WORK/$name.json" "$variant" <<'PY' || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "$variant: units or plan wrong"; }
import json, sys
d = json.load(open(sys.argv[1]))
ptr = "ptr-arrays" in sys.argv[2]
disc, units, regs = d["discovery"], d["units"], {r["id"]: r for r in d["regions"]}
assert disc["state"] == "done", disc
assert [u["name"] for u in units] == [f"unit.{i}" for i in range(6)], [u["name"] for u in units]
for i, u in enumerate(units):
    sizes = sorted(regs[r]["size"] for r in u["regions"])
    want = sorted([512 * 512 * 4, 2048, 2048] + ([2048] if ptr else []) + ([6 * 8] if ptr and i == 0 else []))
    assert sizes == want, (i, sizes, want)
weights = sum(u["bytes"] for u in units)
layer = 512 * 512 * 4 + 2 * 2048 + (2048 if ptr else 0)
assert weights == 6 * layer + (48 if ptr else 0), weights
p = d["plan"]
assert p is not None and p["mode"] == "memory", p
assert p["device_bytes"] <= p["budget"], p
assert p["slots"] >= 1 and sum(not u["resident"] for u in p["units"]) >= 3, p
PY
    pass "$variant: 6 units, every weight byte, a plan streaming within 5 MiB; same output"
done
