# Discovery on the simulated device: the example model's units are found exactly
# (sizes and order) through cudart launches, driver `extra` launches and pointer
# arrays, on one thread or four, with the detector or explicit marks, and with
# activation buffers that alternate from one forward to the next (a pass found two
# forwards long is folded to one; twelve forwards, as the detector's snapshots, every 16
# launches without a host synchronisation, see those buffers move and look for the
# period again); results are those of a run without the shim.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 6 --dim 512 --iters 6 --quiet)

units_check() { # TRACE EXPECT_REGIONS LAST_KERNEL SOURCE WHAT
    python3 - "$@" <<'PY'
import json, os, subprocess, sys
trace, nreg, last, source, what = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
d = json.loads(subprocess.check_output([os.environ["FT_TRACE_BIN"], "--json", trace]))
disc, units, regs = d["discovery"], d["units"], {r["id"]: r for r in d["regions"]}
assert disc["state"] == "done", disc
assert disc["boundary_source"] == source, disc["boundary_source"]
assert [u["name"] for u in units] == [f"unit.{i}" for i in range(6)], [u["name"] for u in units]
for i, u in enumerate(units):
    sizes = [regs[r]["size"] for r in u["regions"]]
    want = [512 * 512 * 4, 2048, 2048] + [2048] * (nreg - 3)
    if i == 0 and nreg == 4:           # the pointer table (a direct argument) joins
        want = want[:3] + [6 * 8, 2048]  # layer 0, before the weight it points to
    assert sizes == want, (i, sizes, want)
    assert u["first_kernel"] == "_Z10model_gemvPKjS0_Pji", u["first_kernel"]
    assert u["last_kernel"] == last, u["last_kernel"]
    assert u["kernel_count"] == (3 if nreg == 3 else 4), u["kernel_count"]
    assert u["first_launch"] == i * u["kernel_count"], (i, u["first_launch"])
    assert "vmm" in regs[u["regions"][0]]["flag_names"], regs[u["regions"][0]]
assert abs(sum(u["weight_share"] for u in units) - 1) < 1e-4  # shares are rounded
PY
}
export FT_TRACE_BIN="$BUILD/bin/ft-trace"

for variant in "plain::3:_Z11model_scalePjPKji:detector" \
               "threads:--threads 4:3:_Z11model_scalePjPKji:detector" \
               "ptr:--ptr-arrays:4:_Z10model_mixpPjPKPKji:detector" \
               "ptr-threads:--ptr-arrays --threads 4:4:_Z10model_mixpPjPKPKji:detector" \
               "mark:--mark:3:_Z11model_scalePjPKji:ft_iteration_mark" \
               "alternate:--alternate-acts --iters 12:3:_Z11model_scalePjPKji:detector"; do
    IFS=: read -r name extra nreg last source <<<"$variant"
    # shellcheck disable=SC2086
    sim "$MODEL" "${ARGS[@]}" $extra >"$WORK/$name.plain" || fail "$name: model without shim failed"
    # With 4 threads, about 1 run in 100 used to take one thread's 2 KiB activation
    # for a weight and then put the pointer table in layer 1. Part of the cause was a
    # change seen only at other threads' first boundaries, which no longer goes unseen
    # (0 in 200 runs since); content-based detection can still be fooled by a buffer
    # equal at every snapshot (harmless for results: every unloaded region is written
    # back), so those variants keep a second run; the same miss twice fails.
    for attempt in 1 2; do
        # shellcheck disable=SC2086
        FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_TRACE_FILE="$WORK/$name.bin" \
            shim "$MODEL" "${ARGS[@]}" $extra >"$WORK/$name.shim" 2>"$WORK/$name.err" || fail "$name: model under shim failed"
        cmp -s "$WORK/$name.plain" "$WORK/$name.shim" || fail "$name: output differs under the shim"
        units_check "$WORK/$name.bin" "$nreg" "$last" "$source" "$name" 2>"$WORK/$name.check" && break
        [[ $name == *threads* && $attempt == 1 ]] || { cat "$WORK/$name.check" >&2; fail "$name: units differ from the model's layers"; }
        echo "  note $name: units differ from the model's layers on the first run; running again"
    done
    pass "$name: 6 units of the right regions, sizes and launch ranges; same output"
done

# Kernels before the weights exist (a framework's warm-up, a communicator's first
# all-reduce) on a buffer every layer then reuses: the passes first found touch no
# weight, so discovery starts over and finds the layers; with marks too.
sim "$MODEL" "${ARGS[@]}" --prologue >"$WORK/pro.plain" || fail "prologue: model without shim failed"
for extra in "" "--mark" "--threads 4"; do
    # shellcheck disable=SC2086
    FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_TRACE_FILE="$WORK/pro.bin" \
        shim "$MODEL" "${ARGS[@]}" --prologue $extra >"$WORK/pro.shim" 2>"$WORK/pro.err" \
        || fail "prologue $extra: model under shim failed"
    [ -z "$extra" ] && { cmp -s "$WORK/pro.plain" "$WORK/pro.shim" || fail "prologue: output differs"; }
    expect_grep 'touch no weight.*starting over' "$WORK/pro.err" "prologue $extra: restart said"
    # Buffers allocated after the first launch and first touched by a kernel (each
    # thread's activations) stay out of the weights after the restart, so with 4
    # threads too each unit is exactly its layer's three regions.
    "$BUILD/bin/ft-trace" --json "$WORK/pro.bin" | python3 -c '
import json, sys
d = json.load(sys.stdin)
regs = {r["id"]: r for r in d["regions"]}
u = d["units"]
assert [x["name"] for x in u] == [f"unit.{i}" for i in range(6)], [x["name"] for x in u]
for x in u:
    sizes = sorted(regs[r]["size"] for r in x["regions"])
    assert sizes == [2048, 2048, 512 * 512 * 4], sizes' || fail "prologue $extra: units differ from the model's layers"
done
pass "warm-up kernels before the weights exist: discovery starts over and finds the 6 layers (detector, marks, 4 threads)"

# A marker kernel: one gemv per pass with one layer.
FT_ENABLED=1 FT_LOG_LEVEL=warn FT_ITERATION_MARKER='*model_gemv*' FT_TRACE_FILE="$WORK/m.bin" \
    shim "$MODEL" --layers 1 --dim 512 --iters 4 --quiet >/dev/null 2>&1 || fail "marker run failed"
"$BUILD/bin/ft-trace" "$WORK/m.bin" >"$WORK/m.txt"
expect_grep 'state +done, 1 iteration seen, boundaries from the marker kernel' "$WORK/m.txt" "marker kernel"
pass "FT_ITERATION_MARKER: boundaries from the marker kernel"

# Unit selection.
FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_EXCLUDE_PATTERNS='unit.0,unit.5' \
    FT_INCLUDE_PATTERNS='kernel:*gemv*' FT_TRACE_FILE="$WORK/p.bin" \
    shim "$MODEL" "${ARGS[@]}" >/dev/null 2>&1 || fail "pattern run failed"
"$BUILD/bin/ft-trace" --json "$WORK/p.bin" | python3 -c '
import json, sys
u = json.load(sys.stdin)["units"]
assert [x["offload"] for x in u] == [False, True, True, True, True, False], [x["offload"] for x in u]' \
    || fail "include/exclude patterns not applied"
pass "FT_INCLUDE_PATTERNS / FT_EXCLUDE_PATTERNS select units"

# Without virtual-memory backing the same units are found; nothing is evictable.
FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_VMM_MIN_SIZE=none FT_TRACE_FILE="$WORK/v.bin" \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/v.out" 2>&1 || fail "FT_VMM_MIN_SIZE=none run failed"
"$BUILD/bin/ft-trace" --json "$WORK/v.bin" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["units"]) == 6 and not any("vmm" in r["flag_names"] for r in d["regions"])' \
    || fail "FT_VMM_MIN_SIZE=none: units or backing wrong"
pass "FT_VMM_MIN_SIZE=none: same units, no region backed by virtual memory"

# NVTX ranges name the units (ft-run makes FlexTensor the NVTX injection library).
FT_DISCOVERY_ITERS=2 ftrun "$BUILD/bin/ft-run" --sim --log-level warn --trace "$WORK/n.bin" -- \
    "$MODEL" "${ARGS[@]}" --nvtx >"$WORK/n.out" 2>&1 || fail "--nvtx run failed"
"$BUILD/bin/ft-trace" --json "$WORK/n.bin" | python3 -c '
import json, sys
u = json.load(sys.stdin)["units"]
assert [x["name"] for x in u] == [f"layers.{i}" for i in range(6)], [x["name"] for x in u]' \
    || fail "units not named after the NVTX ranges"
pass "units named after the enclosing NVTX ranges (layers.0 .. layers.5); a registered-string range inside each (as NCCL's) names nothing"

# A pass that repeats every two layers (odd layers launch the same code through a
# second kernel handle, as torch.compile's Inductor kernels alternate between layers on
# the H100): each period's weights repeat at the half, so each layer is a unit, not
# each pair; with the NVTX ranges, the units still follow layers.0 .. layers.5.
FT_DISCOVERY_ITERS=2 ftrun "$BUILD/bin/ft-run" --sim --log-level warn --trace "$WORK/a.bin" -- \
    "$MODEL" "${ARGS[@]}" --alt-odd --nvtx >"$WORK/a.out" 2>&1 || fail "--alt-odd run failed"
"$BUILD/bin/ft-trace" --json "$WORK/a.bin" | python3 -c '
import json, sys
u = json.load(sys.stdin)["units"]
assert [x["name"] for x in u] == [f"layers.{i}" for i in range(6)], [x["name"] for x in u]' \
    || fail "--alt-odd: units not one a layer"
pass "a pass repeating every two layers (kernels alternating between layers): one unit a layer"
