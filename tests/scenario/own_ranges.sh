# FlexTensor's own work as NVTX ranges, for a profiler (Nsight Systems): with another
# tool's injection library (NVTX_INJECTION64_PATH; here tests/nvtx_probe.c, which
# writes what it receives to a file), the "flextensor" domain holds a range around each
# load ("ft:load unit.N" on the side stream, "ft:miss unit.N" on demand) and unload
# ("ft:unload unit.N"), pushed and popped in pairs; the program's own ranges still
# reach the tool; the same output. With FlexTensor's own injection (ft-run's default)
# or none, no range of FlexTensor's is made.
. "$(dirname "$0")/lib.sh"
PROBE=$BUILD/tests/libnvtx_probe.so
[ -f "$PROBE" ] || fail "$PROBE missing (make builds it)"
ARGS=(--layers 6 --dim 512 --iters 10 --quiet --nvtx)
sim "$MODEL" "${ARGS[@]}" >"$WORK/plain" || fail "model without shim failed"

LOG=$WORK/nvtx.log
NVTX_INJECTION64_PATH=$PROBE FT_TEST_NVTX_LOG=$LOG FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" || { sed 's/^/    | /' "$WORK/err" >&2; fail "under a profiler's injection: failed"; }
cmp -s "$WORK/plain" "$WORK/out" || fail "under a profiler's injection: output differs"
expect_grep 'verdict: offloaded' "$WORK/err" "streamed"
expect_grep '^domain flextensor$' "$LOG" "the flextensor domain"
expect_grep '^push flextensor ft:load unit\.[0-9]+$' "$LOG" "load ranges"
expect_grep '^push flextensor ft:unload unit\.[0-9]+$' "$LOG" "unload ranges"
expect_grep '^push - layers\.[0-9]+$' "$LOG" "the program's ranges"
loads=$(grep -Ec '^push flextensor ft:(load|miss) ' "$LOG")
want=$(sed -n 's/.*residency: \([0-9]*\) load(s).*/\1/p' "$WORK/err")
[ "$loads" = "$want" ] || fail "load and miss ranges: $loads, the exit report's loads: ${want:-none}"
misses=$(grep -Ec '^push flextensor ft:miss ' "$LOG")
want_miss=$(sed -n 's/.*residency: [0-9]* load(s), [0-9]* of them prefetched and \([0-9]*\) on demand.*/\1/p' "$WORK/err")
[ "$misses" = "$want_miss" ] || fail "miss ranges: $misses, the exit report's misses: ${want_miss:-none}"
[ "$(grep -c '^push flextensor ' "$LOG")" = "$(grep -c '^pop flextensor$' "$LOG")" ] || fail "flextensor ranges not in pairs"
pass "under a profiler's NVTX injection: ft:load / ft:miss / ft:unload ranges in the flextensor domain ($loads loads, $misses misses), in pairs, beside the program's ranges; same output"

# ft-run's default: FlexTensor's own injection reads the program's ranges to name the
# units, and FlexTensor makes no range of its own there (own_ranges_setup): the units
# keep the program's names, and the probe is never loaded.
rm -f "$LOG"
FT_TEST_NVTX_LOG=$LOG FT_DISCOVERY_ITERS=2 ftrun "$BUILD/bin/ft-run" --sim --gpu-mem 5MiB --trace "$WORK/r.bin" -- \
    "$MODEL" "${ARGS[@]}" >"$WORK/out2" 2>"$WORK/err2" || { sed 's/^/    | /' "$WORK/err2" >&2; fail "under ft-run: failed"; }
cmp -s "$WORK/plain" "$WORK/out2" || fail "under ft-run: output differs"
[ ! -e "$LOG" ] || fail "under ft-run, the probe was loaded: $(head -3 "$LOG")"
expect_grep 'verdict: offloaded' "$WORK/err2" "under ft-run"
"$BUILD/bin/ft-trace" --json "$WORK/r.bin" | python3 -c '
import json, sys
u = json.load(sys.stdin)["units"]
assert [x["name"] for x in u] == [f"layers.{i}" for i in range(6)], [x["name"] for x in u]' \
    || fail "under ft-run: units not named after the program's ranges"
pass "under ft-run's own NVTX injection: units named after the program's ranges (layers.0 .. layers.5), streamed; same output"
