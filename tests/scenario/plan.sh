# Planning at the end of profiling, on the simulated device: the plan respects the
# budget, an infeasible budget is refused with the smallest one that works, a slow
# link makes the planner keep units resident, and the diagnostics table is printed.
# A unit occupies whole 2 MiB granules: each layer here (1 MiB weight + two 2 KiB
# vectors) counts as 2 MiB + 4 KiB.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 4 --dim 512 --iters 10 --quiet)
plan_json() { "$BUILD/bin/ft-trace" --json "$1" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin).get('plan')))"; }

FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB FT_TRACE_FILE="$WORK/a.bin" \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>&1 || fail "memory-mode run failed"
plan_json "$WORK/a.bin" | python3 -c '
import json, sys
p = json.loads(sys.stdin.read())
assert p["mode"] == "memory" and p["budget"] == 5 << 20, p
assert p["device_bytes"] <= p["budget"], p
assert p["slots"] == 2 and not any(u["resident"] for u in p["units"]), p
assert p["step_ns"] == p["all_resident_ns"], p' || fail "3 MiB budget: wrong plan"
pass "memory mode, 5 MiB: every unit streamed through 2 slots, within the budget, no stall"

set +e
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=3MiB shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 0 ] || fail "an infeasible budget must not stop the program (exit $rc)"
expect_grep 'error: plan: the memory budget 3\.0 MiB .* smallest budget that works is 4\.0 MiB' "$WORK/err" \
    "infeasible budget message"
pass "infeasible budget: a clear error with the smallest budget that works; the program runs on"

# A slow link (1 GB/s: a 1 MiB copy takes longer than a layer's compute) and room for
# everything: the planner keeps every unit resident.
FTSIM_H2D_GBPS=1 FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=16MiB \
    FT_TRACE_FILE="$WORK/b.bin" shim "$MODEL" "${ARGS[@]}" >/dev/null 2>&1 || fail "slow-link run failed"
plan_json "$WORK/b.bin" | python3 -c '
import json, sys
p = json.loads(sys.stdin.read())
assert all(u["resident"] for u in p["units"]) and p["slots"] == 0, p' || fail "slow link: units not kept resident"
pass "slow link, room for all: every unit resident"

# The same link with room for only some: the rest stream, and the model predicts stalls.
FTSIM_H2D_GBPS=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=8MiB FT_LOG_DIAGNOSTICS=1 \
    FT_TRACE_FILE="$WORK/c.bin" shim "$MODEL" "${ARGS[@]}" >/dev/null 2>"$WORK/c.err" || fail "tight run failed"
plan_json "$WORK/c.bin" | python3 -c '
import json, sys
p = json.loads(sys.stdin.read())
assert p["device_bytes"] <= 8 << 20, p
streamed = [u for u in p["units"] if not u["resident"]]
assert streamed and p["step_ns"] > p["all_resident_ns"], p' || fail "tight budget: no streaming or no predicted stall"
expect_grep 'decision' "$WORK/c.err" "diagnostics table header"
expect_grep 'predicted step .* vs all-resident' "$WORK/c.err" "diagnostics totals"
pass "slow link, 8 MiB: units streamed with predicted stalls; FT_LOG_DIAGNOSTICS prints the table"

FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_TRACE_FILE="$WORK/d.bin" \
    shim "$MODEL" "${ARGS[@]}" >/dev/null 2>&1 || fail "latency-mode run failed"
[ "$(plan_json "$WORK/d.bin" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["mode"])')" = latency ] \
    || fail "no budget: not latency mode"
pass "no budget: latency mode"
