# Profiling on the simulated device: each unit's compute time is its kernels' virtual
# durations, exactly; passes suspended by the application are not profiled.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 4 --dim 512 --quiet)
profile() { "$BUILD/bin/ft-trace" --json "$1" | python3 -c "import json,sys; p=json.load(sys.stdin).get('profile'); print(json.dumps(p))"; }

# Two sources: CUPTI's activity records (kernel timestamps; the default when CUPTI is
# there) and CUDA events at unit boundaries (FT_CUPTI=off). With events, the last
# unit's range runs to the next pass; with kernel records it ends with its last kernel.
# first: FT_CUPTI_CONFIRM=first-pass detaches CUPTI after discovery's first pass and
# attaches it again for profiling, whose records still time the kernels.
for src in cupti events held first; do
    env_cupti=(); [ $src = events ] && env_cupti=(FT_CUPTI=off)
    [ $src = held ] && env_cupti=(FTSIM_CUPTI_HELD=1) # another subscriber has CUPTI
    [ $src = first ] && env_cupti=(FT_CUPTI_CONFIRM=first-pass)
    env "${env_cupti[@]}" FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_TRACE_FILE="$WORK/p.bin" \
        LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${ARGS[@]}" --iters 10 >"$WORK/out" 2>"$WORK/err" \
        || fail "$src: model under shim failed"
    [ "$(cat "$WORK/out")" = "$(sim "$MODEL" "${ARGS[@]}" --iters 10)" ] || fail "$src: output changed"
    if [ $src = cupti ] || [ $src = first ]; then
        expect_grep 'profiling: 3 of 3 pass\(es\) timed from CUPTI activity records' "$WORK/err" "$src: source"
        # After profiling, CUPTI is detached at the next driver call's exit (cuptiFinalize)
        expect_grep "CUPTI was detached \(in [0-9.]+ ms\)" "$WORK/err" "$src: detached"
        [ $src = cupti ] || expect_grep "CUPTI: the first pass's [1-9][0-9]* launches, .* all went through the wrappers; detached until profiling" \
            "$WORK/err" "first: detached after the first pass"
    else
        grep -q 'timed from CUPTI activity records' "$WORK/err" && fail "events: CUPTI records used with FT_CUPTI=off"
    fi
    profile "$WORK/p.bin" >"$WORK/p.json"
    python3 - "$WORK/p.json" "$src" <<'PY' || fail "$src: unit compute times are not the kernels' durations"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["passes"] == 3, p
# gemv streams 512*512*4 bytes at 3 bytes/ns, mix and scale take 2 us each (kernels_sim.c)
layer = 512 * 512 * 4 // 3 + 2000 + 2000
u = p["units"]
assert [x["samples"] for x in u] == [3] * 4, u
for x in u[:3]:
    assert x["min_ns"] == x["median_ns"] == x["max_ns"] == layer, (x, layer)
# events: the last unit's range runs to the next pass, so it also holds the output
# copied back to pinned memory (2 us latency + 2 KiB at 55 GB/s) and the next input
# copied in from pageable memory (2 us + 2 KiB at 7.7 GB/s)
tail = (2000 + 2048 / 55.0) + (2000 + 2048 / 7.7) if sys.argv[2] not in ("cupti", "first") else 0
assert abs(u[3]["median_ns"] - (layer + tail)) <= 1, (u[3], layer + tail)
PY
done
pass "unit compute times equal the kernels' virtual durations (3 passes), from CUPTI activity records (also attached again after FT_CUPTI_CONFIRM=first-pass detached it), and from events with FT_CUPTI=off or CUPTI held by another subscriber"

FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_TRACE_FILE="$WORK/s.bin" \
    shim "$MODEL" "${ARGS[@]}" --iters 10 --pause 10 >/dev/null 2>&1 || fail "suspended run failed"
[ "$(profile "$WORK/s.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["passes"])')" = 0 ] \
    || fail "passes were profiled while suspended"
FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3 FT_TRACE_FILE="$WORK/r.bin" \
    shim "$MODEL" "${ARGS[@]}" --iters 12 --pause 7 >/dev/null 2>&1 || fail "resumed run failed"
[ "$(profile "$WORK/r.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["passes"])')" = 3 ] \
    || fail "profiling did not resume"
pass "ft_profiling_suspend/resume (called before profiling began): suspended passes not profiled"

FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=1 shim "$MODEL" "${ARGS[@]}" --iters 8 \
    >/dev/null 2>"$WORK/q.err" || fail "one-pass run failed"
expect_grep 'profiling: only 1 profiled pass' "$WORK/q.err" "quality report"
pass "quality report: too few passes"

# The copy bandwidth is measured on pinned buffers: the simulator's 55 GB/s, its 2 us
# per-copy latency taken out (measured with small copies).
"$BUILD/bin/ft-trace" --json "$WORK/p.bin" | python3 -c '
import json, sys
b = json.load(sys.stdin)["bandwidth"]
for k in ("h2d_gbps", "d2h_gbps", "h2d_both_gbps", "d2h_both_gbps"):
    assert abs(b[k] - 55.0) < 0.01, (k, b[k])' || fail "bandwidth not the simulated 55 GB/s"
pass "copy bandwidth measured on pinned memory (both directions, alone and together)"

# The fixed cost of one copy, for the plan's model: the simulator's latency.
for lat in 2000 10000; do
    FTSIM_COPY_LATENCY_NS=$lat FT_ENABLED=1 FT_DISCOVERY_ITERS=2 shim "$MODEL" "${ARGS[@]}" --iters 6 \
        >/dev/null 2>"$WORK/lat.err" || fail "latency run failed"
    expect_grep "; $((lat / 1000))\.0 us per copy$" "$WORK/lat.err" "copy latency $lat ns"
done
pass "the fixed cost of a copy is measured (2 and 10 us on the simulator)"
