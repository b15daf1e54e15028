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

# Below the smallest two-slot plan (4 MiB), one slot: each unit copied in once the one
# before has left, none overlapped, within the budget, said (before: no plan, every
# weight on the device past the budget). Below one slot's (a unit's 2 MiB and more),
# refused with that smallest budget.
plain=$(sim "$MODEL" "${ARGS[@]}" | tail -n 1)
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=3MiB FTSIM_REPORT_PEAK=1 shim "$MODEL" "${ARGS[@]}" \
    >"$WORK/out" 2>"$WORK/err" || fail "a one-slot plan's run failed"
[ "$(tail -n 1 "$WORK/out")" = "$plain" ] || fail "3 MiB, one slot: checksum differs"
expect_grep 'plan \(memory mode, knapsack\): 4 of 4 units streamed through 1 slot\(s\)' "$WORK/err" "one-slot plan"
expect_grep 'warning: plan: one slot: the budget 3\.0 MiB is below the smallest that pipelines the copies with 2 slots \(4\.0 MiB\)' \
    "$WORK/err" "one-slot plan"
expect_grep 'verdict: offloaded: 4 of 4 units stream' "$WORK/err" "one-slot plan"
set +e
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=1MiB shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 0 ] || fail "an infeasible budget must not stop the program (exit $rc)"
expect_grep 'error: plan: the memory budget 1\.0 MiB .* and 1 slot\(s\); the smallest budget that works is 2\.0 MiB' \
    "$WORK/err" "infeasible budget message"
pass "below the smallest two-slot plan: one slot, same output, said; below one slot's: a clear error with the smallest budget that works; the program runs on"

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

# The unit selection (FT_EXCLUDE_PATTERNS / FT_INCLUDE_PATTERNS): a unit it leaves out
# stays resident whatever the plan would gain by streaming it, and a budget that cannot
# hold the kept units is refused naming the option. Results never change.
streamed_units() { # TRACE: the names of the units the plan streams, one per line
    "$BUILD/bin/ft-trace" --json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d.get("plan")
assert p is not None, "no plan in the trace"
for u, pu in zip(d["units"], p["units"]):
    if not pu["resident"]:
        print(u["name"])'
}
ARGS8=(--layers 8 --dim 512 --iters 10 --quiet)
want=$(sim "$MODEL" "${ARGS8[@]}" | tail -n 1)
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_TRACE_FILE="$WORK/e0.bin" shim "$MODEL" "${ARGS8[@]}" >/dev/null 2>&1 \
    || fail "latency-mode run (8 layers) failed"
[ -n "$(streamed_units "$WORK/e0.bin")" ] || fail "latency mode, 8 layers: nothing streamed without patterns"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_EXCLUDE_PATTERNS='*' FT_TRACE_FILE="$WORK/e1.bin" \
    shim "$MODEL" "${ARGS8[@]}" >"$WORK/e1.out" 2>"$WORK/e1.err" || fail "FT_EXCLUDE_PATTERNS='*' run failed"
[ -z "$(streamed_units "$WORK/e1.bin")" ] || fail "FT_EXCLUDE_PATTERNS='*': units streamed: $(streamed_units "$WORK/e1.bin" | tr '\n' ' ')"
[ "$(tail -n 1 "$WORK/e1.out")" = "$want" ] || fail "FT_EXCLUDE_PATTERNS='*': checksum differs from the run without the shim"
expect_grep 'verdict: no plan: all 8 units stay resident: FT_EXCLUDE_PATTERNS keeps every one' "$WORK/e1.err" \
    "FT_EXCLUDE_PATTERNS='*' verdict"
pass "FT_EXCLUDE_PATTERNS='*': 0 of 8 units streamed (some without it), same checksum as without the shim"

set +e
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_EXCLUDE_PATTERNS='*' FT_GPU_MEM_LIMIT=5MiB shim "$MODEL" "${ARGS8[@]}" \
    >"$WORK/e2.out" 2>"$WORK/e2.err"
rc=$?
set -e
[ $rc -eq 0 ] || fail "FT_EXCLUDE_PATTERNS='*' under a small budget must not stop the program (exit $rc)"
expect_grep 'error: plan: the memory budget 5\.0 MiB .*the 8 unit\(s\) kept resident by FT_EXCLUDE_PATTERNS \(16\.0 MiB\).* smallest budget that works is 16\.0 MiB' \
    "$WORK/e2.err" "kept units over the budget"
[ "$(tail -n 1 "$WORK/e2.out")" = "$want" ] || fail "FT_EXCLUDE_PATTERNS='*', 5 MiB: checksum differs"
pass "FT_EXCLUDE_PATTERNS='*', 5 MiB: refused, naming the option and the 16 MiB it keeps; same checksum"

FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_INCLUDE_PATTERNS='unit.[1-4]' FT_TRACE_FILE="$WORK/e3.bin" \
    shim "$MODEL" "${ARGS8[@]}" >"$WORK/e3.out" 2>"$WORK/e3.err" || fail "FT_INCLUDE_PATTERNS run failed"
got=$(streamed_units "$WORK/e3.bin" | tr '\n' ' ')
[ -n "$got" ] || fail "FT_INCLUDE_PATTERNS='unit.[1-4]': nothing streamed"
for u in $got; do
    case $u in unit.[1-4]) ;; *) fail "FT_INCLUDE_PATTERNS='unit.[1-4]': $u streamed" ;; esac
done
[ "$(tail -n 1 "$WORK/e3.out")" = "$want" ] || fail "FT_INCLUDE_PATTERNS: checksum differs"
expect_grep 'verdict: offloaded: [1-4] of 8 units stream .*; 4 kept resident by FT_INCLUDE_PATTERNS' "$WORK/e3.err" \
    "FT_INCLUDE_PATTERNS verdict"
pass "FT_INCLUDE_PATTERNS='unit.[1-4]': only those stream ($got), same checksum"

set +e
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_INCLUDE_PATTERNS='unit.1' FT_GPU_MEM_LIMIT=8MiB FT_TRACE_FILE="$WORK/e4.bin" \
    shim "$MODEL" "${ARGS8[@]}" >"$WORK/e4.out" 2>"$WORK/e4.err"
rc=$?
set -e
[ $rc -eq 0 ] || fail "FT_INCLUDE_PATTERNS='unit.1' under a small budget must not stop the program (exit $rc)"
expect_grep 'error: plan: .*the 7 unit\(s\) kept resident by FT_INCLUDE_PATTERNS \(14\.0 MiB\).*or fewer units kept by FT_INCLUDE_PATTERNS' \
    "$WORK/e4.err" "FT_INCLUDE_PATTERNS='unit.1', 8 MiB"
[ "$(tail -n 1 "$WORK/e4.out")" = "$want" ] || fail "FT_INCLUDE_PATTERNS='unit.1': checksum differs"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_INCLUDE_PATTERNS='unit.1' FT_GPU_MEM_LIMIT=20MiB FT_TRACE_FILE="$WORK/e5.bin" \
    shim "$MODEL" "${ARGS8[@]}" >/dev/null 2>&1 || fail "FT_INCLUDE_PATTERNS='unit.1', 20 MiB run failed"
got=$(streamed_units "$WORK/e5.bin" | tr '\n' ' ')
[ -z "$got" ] || [ "$got" = "unit.1 " ] || fail "FT_INCLUDE_PATTERNS='unit.1': $got streamed"
pass "FT_INCLUDE_PATTERNS='unit.1': 8 MiB refused naming the option (7 units kept), 20 MiB streams nothing but unit.1"
