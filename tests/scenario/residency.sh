# The residency engine, first version: streamed units live in pinned host memory and
# are copied in ahead of use on a side stream (or on demand, on a miss), at most
# `slots` at once; results are those of a run without the shim, also with writes into
# an offloaded weight, several threads, and streams that take real time
# (FTSIM_TIME_SCALE).
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 6 --dim 512 --iters 12 --quiet)

run_pair() { # NAME EXTRA...
    local name=$1
    shift
    sim "$MODEL" "${ARGS[@]}" "$@" >"$WORK/$name.plain" || fail "$name: model without shim failed"
    FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=${LIMIT:-5MiB} \
        shim "$MODEL" "${ARGS[@]}" "$@" >"$WORK/$name.shim" 2>"$WORK/$name.err" \
        || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "$name: model under the engine failed"; }
    cmp -s "$WORK/$name.plain" "$WORK/$name.shim" || fail "$name: output differs under the engine"
    expect_grep 'residency: 6 unit\(s\), 6\.0 MiB, moved to (pinned|pageable) host memory' "$WORK/$name.err" "$name: eviction"
    expect_grep 'residency: [1-9][0-9]* load\(s\), .* at most 4\.0 MiB of streamed units held at once' \
        "$WORK/$name.err" "$name: loads within the slots"
}

run_pair plain
expect_grep 'unload\(s\), 0 of them copied back' "$WORK/plain.err" "plain: unchanged units dropped"
expect_grep 'host time per load: .* [1-9][0-9]* of [0-9]+ regions mapped onto the physical memory of the unit unloaded before' \
    "$WORK/plain.err" "plain: physical memory reused"
expect_grep 'residency: [1-9][0-9]* of the prefetches made on FlexTensor.s prefetching thread' "$WORK/plain.err" \
    "plain: prefetches on the prefetching thread"
# Most of them hand the leaving unit's physical memory over in stream order: its checksum
# and copy back behind its last launch, then the next unit's copy, with no host wait.
expect_grep 'prefetching thread, off the application.s \(FT_PREFETCH_THREAD\); [1-9][0-9]* of them handed the leaving unit.s memory over in stream order' \
    "$WORK/plain.err" "plain: hand-overs"
pass "6 of 6 units offloaded under a 5 MiB budget (2 slots): same output; at most 2 units held; none copied back (device checksum); prefetched on FlexTensor's own thread, handing slots over in stream order"
# The same on the application's thread (FT_PREFETCH_THREAD=false); and the prefetching
# thread beside three application threads.
FT_PREFETCH_THREAD=false run_pair app-thread
expect_no_grep 'prefetching thread' "$WORK/app-thread.err" "app-thread"
# 24 forwards a thread: three threads' forwards interleave, and on a loaded machine
# discovery took 253 launches of the 648 that 12 give, leaving profiling too few clean
# passes (no plan: "the program ended during profiling"; once in CI beside a TSan run).
run_pair mover-threads --threads 3 --iters 24
expect_grep 'residency: [1-9][0-9]* of the prefetches made on FlexTensor.s prefetching thread' \
    "$WORK/mover-threads.err" "mover-threads"
pass "prefetches on the application's thread (FT_PREFETCH_THREAD=false), and on FlexTensor's with 3 application threads: same output"
# The device refuses one allocation (FTSIM_FAIL_ALLOC=N: the Nth cuMemAlloc or
# cuMemCreate fails once, as when another process holds the memory). Where it is a
# load's physical memory, the load is given up whole, never left half mapped (its
# kernels faulted: an illegal address), and the call that needs the unit loads it on
# its own thread, with spare memory let go and unused units made to leave first. Where
# it is FT_SPILL's, before the plan, moving an allocation back in, the least recently
# touched ones leave until it maps (it faulted too). The program's own allocations fail
# as they would without FlexTensor (the first ones here): those runs are not judged.
loads=0
spills=0
for n in $(seq 16 2 100); do
    rc=0
    FT_SPILL=1 FTSIM_FAIL_ALLOC=$n FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
        shim "$MODEL" "${ARGS[@]}" >"$WORK/fa.out" 2>"$WORK/fa.err" || rc=$?
    if grep -q 'residency: the device has no physical memory for unit' "$WORK/fa.err"; then
        loads=$((loads + 1))
        expect_grep 'the device had no physical memory for some loads .*: [0-9]+ loaded unit\(s\) made to leave for them, [0-9]+ load\(s\) given up' \
            "$WORK/fa.err" "a refused load: said at exit"
    elif grep -q 'FT_SPILL: before the plan, the device refused the memory of an allocation moving back in' "$WORK/fa.err"; then
        spills=$((spills + 1))
    else
        continue
    fi
    [ "$rc" = 0 ] && cmp -s "$WORK/plain.plain" "$WORK/fa.out" ||
        { sed 's/^/    | /' "$WORK/fa.err" >&2; fail "a refused allocation (FTSIM_FAIL_ALLOC=$n): rc $rc, or the output differs"; }
done
[ "$loads" -gt 0 ] && [ "$spills" -gt 0 ] ||
    fail "FTSIM_FAIL_ALLOC from 16 to 100 refused $loads load(s) and $spills FT_SPILL move(s) in: one of each at least wanted"
pass "the device refuses memory to a load ($loads case(s)) or to FT_SPILL moving an allocation back in ($spills): made again or made room for; same output, no fault"

# A device with little room left (14 MiB for a 12 MiB model, budget above it):
# FlexTensor's own allocations (the link's measure) fail. The error they leave must not
# reach the program's cudaGetLastError, which model.c checks after every forward as
# PyTorch does after every launch (it reported "out of memory" there before).
for spill in 0 1; do
    FT_SPILL=$spill FTSIM_DEVICE_MEM=14MiB FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=100MiB \
        shim "$MODEL" "${ARGS[@]}" >"$WORK/full-$spill.out" 2>"$WORK/full-$spill.err" \
        || { grep -v '^flextensor' "$WORK/full-$spill.err" | tail -3 >&2; fail "a nearly full device (FT_SPILL=$spill): run failed"; }
    cmp -s "$WORK/plain.plain" "$WORK/full-$spill.out" || fail "a nearly full device (FT_SPILL=$spill): output differs"
done
pass "a nearly full device: FlexTensor's own failed allocations leave no error for the program's cudaGetLastError; same output"
# The device refuses one copy (FTSIM_FAIL_COPY=N: the Nth copy fails once at enqueue).
# Where it is one of FlexTensor's own (a load, a copy back, FT_SPILL's moves, a
# checksum read), it is made again and its error taken back: before, the program's
# cudaGetLastError raised it (26 of the runs below died, or gave another output). The
# program's own copies fail as they would without FlexTensor: those runs are not judged.
own=0
for n in $(seq 2 3 160); do
    rc=0
    FT_SPILL=1 FTSIM_FAIL_COPY=$n FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
        shim "$MODEL" "${ARGS[@]}" >"$WORK/fc.out" 2>"$WORK/fc.err" || rc=$?
    grep -q "a copy of FlexTensor's own .* failed (cudaError [0-9]*); made again: done" "$WORK/fc.err" || continue
    own=$((own + 1))
    [ "$rc" = 0 ] && cmp -s "$WORK/plain.plain" "$WORK/fc.out" ||
        { sed 's/^/    | /' "$WORK/fc.err" >&2; fail "a refused copy of FlexTensor's own (FTSIM_FAIL_COPY=$n): rc $rc, or the output differs"; }
done
[ "$own" -ge 10 ] || fail "FTSIM_FAIL_COPY from 2 to 160 failed $own copies of FlexTensor's own: 10 at least wanted"
pass "the device refuses one of FlexTensor's own copies ($own cases): made again, its error taken back; same output"
# Without the device checksum (a driver that cannot JIT its PTX): discovery samples
# the candidates' bytes instead and finds the same units; every unload copies back
FTSIM_NO_JIT=1 run_pair nojit
expect_grep 'the device checksum kernel did not load \(CUresult [0-9]+\)' "$WORK/nojit.err" "nojit: said once"
n=$(grep -oE '[0-9]+ unload\(s\), [0-9]+ of them copied back' "$WORK/nojit.err" | head -1)
[ -n "$n" ] && [ "$(echo "$n" | cut -d' ' -f1)" = "$(echo "$n" | cut -d' ' -f3)" ] \
    || fail "nojit: every unload should copy back ($n)"
pass "without the device checksum: the same 6 units found by sampling; same output; every unload copied back ($n)"
# FlexTensor's own host time per launch, sampled in each phase (1 launch in 64), in the
# exit report: under the budget (streaming), and with a budget above the model (the
# plan streams nothing); 16 layers give every phase enough launches
for lim in 5MiB 1GiB; do
    FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=$lim FTSIM_TIME_SCALE=0.01 \
        shim "$MODEL" "${ARGS[@]}" --layers 16 >"$WORK/self-$lim.out" 2>"$WORK/self-$lim.err" \
        || fail "launch self time at $lim: run failed"
done
expect_grep 'host time in FlexTensor per launch, the real call excluded \(1 launch in 64 sampled\): discovery [0-9.]+ us \([1-9][0-9]*\), profiling [0-9.]+ us \([1-9][0-9]*\), streaming [0-9.]+ us \([1-9][0-9]*\)' \
    "$WORK/self-5MiB.err" "launch self time while streaming"
expect_grep 'discovery [0-9.]+ us \([1-9][0-9]*\), profiling [0-9.]+ us \([1-9][0-9]*\), after a plan that streams nothing [0-9.]+ us \([1-9][0-9]*\)' \
    "$WORK/self-1GiB.err" "launch self time after a plan that streams nothing"
# ... with the one-time work (a kernel's first sight, pointer-array peeks, discovery's
# weight snapshots at its passes) timed apart
expect_grep "one-time work in launches, left out of the line above: [1-9][0-9]* kernels' first launch [0-9.]+ us each; [0-9]+ pointer-array peeks [0-9.]+ us each \(a stream sync and small copies\); [1-9][0-9]* weight snapshots of discovery's passes [0-9.]+ us each" \
    "$WORK/self-1GiB.err" "one-time launch work reported apart"
pass "FlexTensor's own host time per launch is reported for discovery, profiling, streaming and after a plan that streams nothing"
run_pair poke --poke 9
expect_grep 'unload\(s\), [1-9][0-9]* of them copied back' "$WORK/poke.err" "poke: changed unit copied back"
pass "a write into an offloaded weight is kept (the device checksum finds it changed: copied back before its memory goes)"
# (--lockstep: the threads start each forward together, so that the plan comes within
# the 12 forwards however the host schedules them)
run_pair threads --threads 3 --lockstep
pass "3 threads on 3 streams: same output"
# ... and on cudaStreamPerThread: one handle, a stream per thread. Keyed by the handle,
# a thread skipped the wait for a unit's copy that another thread's stream had made:
# wrong results in 3 runs of 24, three at a time (the load widens the window).
sim "$MODEL" "${ARGS[@]}" --threads 3 --per-thread-stream >"$WORK/ptds.plain" || fail "ptds: model without shim failed"
for round in 1 2 3 4 5 6 7 8; do
    for i in 1 2 3; do
        FT_SPILL=1 FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
            shim "$MODEL" "${ARGS[@]}" --threads 3 --per-thread-stream >"$WORK/ptds-$i.out" 2>"$WORK/ptds-$i.err" &
    done
    wait
    for i in 1 2 3; do
        cmp -s "$WORK/ptds.plain" "$WORK/ptds-$i.out" \
            || { grep '^model:' "$WORK/ptds-$i.err" >&2; fail "ptds: round $round run $i: output differs"; }
    done
done
pass "3 threads on cudaStreamPerThread, 24 runs three at a time: same output"
run_pair zero --zero 9
expect_grep 'residency: 1 copy\(ies\) or set\(s\) to or from units in host memory served there' "$WORK/zero.err" "zero: served"
pass "a driver memset (cuMemsetD32, found by dlsym) into an evicted weight is done on its host store, the unit not loaded: same output"
run_pair drop --iters 14 --drop 11
pass "the application frees a streamed layer mid-run: same output"
# The guessing guard (FT_STRICT_GUARD=0; the default loads every unit an address
# reaches, stale or not, since a wrong guess is an illegal address):
# One miss, the rest prefetched (29 or 30 loads: the prefetch after the last pass may
# be left undone at exit, as the final copy out no longer waits for the prefetching
# thread's move).
FT_STRICT_GUARD=0 run_pair stale --stale
expect_grep 'residency: (29|30) load\(s\), (28|29) of them prefetched and 1 on demand' "$WORK/stale.err" "stale: prefetched"
expect_grep 'residency: [1-9][0-9]* touch\(es\) of units not loaded were taken for stale pointers and loaded nothing: [1-9][0-9]* found only at argument words that held garbage' \
    "$WORK/stale.err" "stale: skipped touches"
FT_STRICT_GUARD=1 run_pair strict --stale
expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and ([1-9][0-9]+) on demand' "$WORK/strict.err" "strict: misses"
# The trace lists the first misses: the unit, the pass, where the pass was, the call.
FT_STRICT_GUARD=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB FT_TRACE_FILE="$WORK/miss.bin" \
    shim "$MODEL" "${ARGS[@]}" --stale >/dev/null 2>"$WORK/miss.err" || fail "strict traced run failed"
nm=$(sed -n 's/.*prefetched and \([0-9]*\) on demand.*/\1/p' "$WORK/miss.err")
[ -n "$nm" ] && [ "$nm" -gt 0 ] || fail "strict traced run: no misses"
nm=$((nm < 32 ? nm : 32)) # the trace keeps the first 32
"$BUILD/bin/ft-trace" "$WORK/miss.bin" >"$WORK/miss.txt" || fail "ft-trace on the misses"
expect_grep "^misses \(the first $nm: a unit loaded on demand by the call that touched it\)" "$WORK/miss.txt" "misses table"
expect_grep '^  unit\.[0-9]+ +[0-9]+ +[0-9]+ (recorded|off) +_Z10model_bumpPj10model_meta$' "$WORK/miss.txt" "a stale call's miss"
"$BUILD/bin/ft-trace" --json "$WORK/miss.bin" | python3 -c '
import json, sys
m = json.load(sys.stdin)["misses"]
assert len(m) == int(sys.argv[1]) and all(x["call"].startswith("_Z10model_") for x in m), m' "$nm" \
    || fail "misses in JSON"
pass "stale weight addresses in a struct's unused tail: units unchanged; with FT_STRICT_GUARD=0 nothing loaded for them, by default they are loaded (more misses); same output"
# From forward 6 on, a far layer's weight in a tail word that held NULL in discovery
# (even layers: never a device address there) or the activation's address (odd
# layers: in a pass that follows the recorded one, that unit is touched outside its
# range of positions).
FT_STRICT_GUARD=0 run_pair stale_late --stale-from 6
expect_grep 'residency: (29|30) load\(s\), (28|29) of them prefetched and 1 on demand' "$WORK/stale_late.err" "stale_late: prefetched"
expect_grep 'residency: [1-9][0-9]* touch\(es\) of units not loaded were taken for stale pointers and loaded nothing: [1-9][0-9]* found only at argument words that held garbage, or never a device address, in discovery; [1-9][0-9]* from a kernel that touched no weight in the recorded pass or at a position outside their unit.s range' \
    "$WORK/stale_late.err" "stale_late: skipped touches"
pass "stale weight addresses first seen after discovery, in words that held NULL or an activation's address: with FT_STRICT_GUARD=0 nothing loaded for them, same output"
# From forward 6 on, every layer launches a kernel discovery never saw (the prefill's
# cat kernels on the GPU) whose unused tail holds layer 8's weight: the third touch in a
# row, a few launches apart, and those after it are stale (the repeat rule). Before it,
# layer 8 was loaded in nearly every layer (FT_STRICT_GUARD=1 still does).
L12=(--layers 12 --dim 512 --iters 12 --quiet --stale-new 6)
sim "$MODEL" "${L12[@]}" >"$WORK/sn.plain" || fail "stale_new: model without shim failed"
for strict in 0 1; do
    FT_STRICT_GUARD=$strict FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=9MiB \
        shim "$MODEL" "${L12[@]}" >"$WORK/sn.shim" 2>"$WORK/sn$strict.err" \
        || { sed 's/^/    | /' "$WORK/sn$strict.err" >&2; fail "stale_new: model under the engine failed"; }
    cmp -s "$WORK/sn.plain" "$WORK/sn.shim" || fail "stale_new (strict $strict): output differs under the engine"
done
expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and [0-3] on demand' "$WORK/sn0.err" "stale_new: few misses"
expect_grep 'taken for stale pointers .* [1-9][0-9]* touched by the same kernel every few launches' \
    "$WORK/sn0.err" "stale_new: repeat rule"
expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and [1-9][0-9]+ on demand' "$WORK/sn1.err" "stale_new: strict misses"
pass "a kernel first seen after discovery carries one weight's address in every layer: at most 3 misses (FT_STRICT_GUARD=1: 10 or more), same output"
# Weights carved out of shared 3 MiB segments (each holds parts of neighbouring layers,
# as PyTorch's caching allocator packs tensors under 10 MiB into 20 MiB segments): the
# segment is the region, so a unit is the layers sharing one; the pass is still the
# whole forward (36 launches), and the segments stream.
SEG=(--layers 12 --dim 512 --iters 10 --quiet --segments 3)
sim "$MODEL" "${SEG[@]}" >"$WORK/seg.plain" || fail "segments: model without shim failed"
FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=9MiB shim "$MODEL" "${SEG[@]}" \
    >"$WORK/seg.shim" 2>"$WORK/seg.err" || { sed 's/^/    | /' "$WORK/seg.err" >&2; fail "segments: failed"; }
cmp -s "$WORK/seg.plain" "$WORK/seg.shim" || fail "segments: output differs under the engine"
expect_grep 'discovery: 2 iteration\(s\) of 36 launches, 6 units, 18\.0 MiB of weights' "$WORK/seg.err" "segments: pass and units"
expect_grep 'residency: 6 unit\(s\), .* moved to pinned host memory' "$WORK/seg.err" "segments: streamed"
pass "weights in shared 3 MiB segments: the whole forward is the pass, a unit per segment (6), they stream; same output"
# Segments holding many layers (8 MiB: 8 layers; 20 MiB: 19): by region alone, every
# layer's launches looked alike and a pass looked 78 and 6 launches long (PyTorch with
# hidden 1024 on the H200: 24 launches, 3 units). The offset of each pointer into its
# segment tells the layers apart: the pass is the whole forward (96 launches). The
# 20 MiB segments, over half the budget, are served in pieces of one granule (2 MiB):
# units follow the layers (18), and each piece, holding two 1 MiB layers, stays on the
# device.
for A in "20 18 40" "8 5 40"; do
    read -r mb nu wt <<<"$A"
    S8=(--layers 32 --dim 512 --iters 12 --quiet --segments "$mb")
    sim "$MODEL" "${S8[@]}" >"$WORK/s8.plain" || fail "segments $mb: model without shim failed"
    FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=24MiB shim "$MODEL" "${S8[@]}" \
        >"$WORK/s8.shim" 2>"$WORK/s8.err" || { sed 's/^/    | /' "$WORK/s8.err" >&2; fail "segments $mb: failed"; }
    cmp -s "$WORK/s8.plain" "$WORK/s8.shim" || fail "segments $mb: output differs"
    expect_grep "discovery: 2 iteration\\(s\\) of 96 launches, $nu units, $wt\\.0 MiB of weights" "$WORK/s8.err" \
        "segments $mb: the pass is the forward"
done
expect_grep 'residency: 5 unit\(s\), 40\.0 MiB, moved to pinned host memory' "$WORK/s8.err" "segments 8: streamed"
pass "segments of 8 and 20 MiB, each holding many layers: the pass is the whole forward (96 launches), a unit per segment; at 24 MiB the 8 MiB segments stream; same output"
# Every allocation from virtual memory (FT_VMM_MIN_SIZE=1B): a unit is a layer's weight
# and its two vectors, given addresses end to end out of one reservation
# (FT_VMM_RESERVE), and a load sets their access in one call (cuMemSetAccess cost
# 270-700 us a call on the two-H200 machine, whatever the size). The simulator, as the
# H200's driver did, places separate reservations apart: with FT_VMM_RESERVE=0 (one
# reservation each) it takes a call per region.
V=(--layers 8 --dim 1024 --iters 10 --quiet)
sim "$MODEL" "${V[@]}" >"$WORK/va.plain" || fail "access runs: model without shim failed"
FTSIM_TIME_SCALE=0.01 FT_VMM_MIN_SIZE=1B FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=30MiB \
    shim "$MODEL" "${V[@]}" >"$WORK/va.shim" 2>"$WORK/va.err" || { sed 's/^/    | /' "$WORK/va.err" >&2; fail "access runs: failed"; }
cmp -s "$WORK/va.plain" "$WORK/va.shim" || fail "access runs: output differs"
calls=$(sed -n 's/.*cuMemSetAccess (\([0-9]*\) call(s) for \([0-9]*\) region(s)).*/\1 \2/p' "$WORK/va.err")
read -r nc nr <<<"$calls"
[ -n "$nc" ] && [ "$nc" -gt 0 ] && [ $((nc * 3)) = "$nr" ] ||
    fail "access runs: want one cuMemSetAccess call per 3 regions, got '${calls:-no report}'"
FTSIM_TIME_SCALE=0.01 FT_VMM_RESERVE=0 FT_VMM_MIN_SIZE=1B FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=30MiB \
    shim "$MODEL" "${V[@]}" >"$WORK/va0.shim" 2>"$WORK/va0.err" || { sed 's/^/    | /' "$WORK/va0.err" >&2; fail "access runs, FT_VMM_RESERVE=0: failed"; }
cmp -s "$WORK/va.plain" "$WORK/va0.shim" || fail "access runs, FT_VMM_RESERVE=0: output differs"
calls0=$(sed -n 's/.*cuMemSetAccess (\([0-9]*\) call(s) for \([0-9]*\) region(s)).*/\1 \2/p' "$WORK/va0.err")
read -r nc0 nr0 <<<"$calls0"
[ -n "$nc0" ] && [ "$nc0" -gt 0 ] && [ "$nc0" = "$nr0" ] ||
    fail "access runs, FT_VMM_RESERVE=0: want a call per region, got '${calls0:-no report}'"
# With cuMemSetAccess taking 0.5 ms of host time (FTSIM_VMM_ACCESS_NS, as on the
# two-H200 machine) the fewer calls shorten the step (virtual time), when the
# application's thread makes the loads (FT_PREFETCH_THREAD=false): the simulator keeps
# one host clock for all threads, so it cannot show the prefetching thread's calls
# beside the application's launches.
V14=(--layers 8 --dim 1024 --iters 14 --quiet)
sim "$MODEL" "${V14[@]}" >"$WORK/vt.plain" || fail "access runs: model without shim failed (14 forwards)"
for r in 16GiB 0; do
    FT_PREFETCH_THREAD=false FTSIM_VMM_ACCESS_NS=500000 FT_VMM_RESERVE=$r FT_VMM_MIN_SIZE=1B FT_ENABLED=1 FT_DISCOVERY_ITERS=2 \
        FT_GPU_MEM_LIMIT=30MiB shim "$MODEL" "${V14[@]}" >"$WORK/vt.shim" 2>"$WORK/vt-$r.err" \
        || { sed 's/^/    | /' "$WORK/vt-$r.err" >&2; fail "access runs, 0.5 ms a call ($r): failed"; }
    cmp -s "$WORK/vt.plain" "$WORK/vt.shim" || fail "access runs, 0.5 ms a call ($r): output differs"
done
s1=$(sed -n 's/.*measured step \([0-9.]*\) us.*/\1/p' "$WORK/vt-16GiB.err")
s0=$(sed -n 's/.*measured step \([0-9.]*\) us.*/\1/p' "$WORK/vt-0.err")
awk -v a="$s1" -v b="$s0" 'BEGIN { exit !(a > 0 && b > 0 && a <= 0.97 * b) }' ||
    fail "access runs, 0.5 ms a call: step $s1 us with one reservation for many, $s0 us with one each"
pass "a unit of three regions cut end to end from one reservation: its access set in one call a load ($nc calls for $nr regions; $nc0 for $nr0 with a reservation each); at 0.5 ms a call, step $s1 us against $s0 us; same output"
# From forward 6 on, once a forward, right after layer 0's first kernel, a kernel
# discovery never saw carries layer 8's weight (generate's reduce kernel on the H200):
# the far unit is loaded for it (8 misses, one a forward), but a touch more than half a
# pass from its unit's range starts no prefetch; it did, and the prefetch evicted
# layer 1's unit, missed in turn (16 misses before).
FAR=(--layers 12 --dim 512 --iters 14 --quiet --far-new 6)
sim "$MODEL" "${FAR[@]}" >"$WORK/far.plain" || fail "far: model without shim failed"
FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=9MiB shim "$MODEL" "${FAR[@]}" \
    >"$WORK/far.shim" 2>"$WORK/far.err" || { sed 's/^/    | /' "$WORK/far.err" >&2; fail "far: failed"; }
cmp -s "$WORK/far.plain" "$WORK/far.shim" || fail "far: output differs under the engine"
nm=$(sed -n 's/.*prefetched and \([0-9]*\) on demand.*/\1/p' "$WORK/far.err")
[ -n "$nm" ] && [ "$nm" -le 10 ] || { sed 's/^/    | /' "$WORK/far.err" >&2; fail "far: $nm misses, want at most 10"; }
pass "a stale address far from where the pass is, once a forward: its unit is loaded but starts no prefetch ($nm misses; 16 before), same output"
# From forward 4 on (profiling's passes), the forward runs on another pair of
# activation buffers, alive before the first launch as the first pair: the pass's first
# launch touches other regions than in discovery. Passes are followed by the start's
# own weight; by the detector's anchor (all the regions), no pass started again and
# nothing was offloaded (the H200, 2026-11-29).
run_pair swap --swap-acts 4
expect_grep 'residency: (29|30) load\(s\), (28|29) of them prefetched and 1 on demand' "$WORK/swap.err" "swap: prefetched"
pass "the first launch's activations move after discovery: passes still start, the model streams, same output"
# Odd forwards run on the second pair, even ones on the first (a program keeping its
# last output alive): discovery finds a pass two forwards long and folds it to one.
run_pair alternate --alternate-acts
expect_grep 'discovery: the pass found is 2 copies of one of 18 launches' "$WORK/alternate.err" "alternate: folded"
expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and [0-2] on demand' "$WORK/alternate.err" "alternate: prefetched"
pass "activations that alternate from one forward to the next: one forward a pass, the model streams, same output"
# From forward 9 on, each layer runs one more gemv reading its own weight and a far
# layer's (data-dependent code after discovery): the far unit is a miss, loaded without
# evicting the unit the same launch reads (that launch read unmapped memory before),
# and the launch that reads the pass start's weight with another layer's does not start
# a pass (positions restarted mid-pass, and the far weight was taken for stale).
run_pair cross --iters 14 --cross-from 9
expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and [1-9][0-9]* on demand' "$WORK/cross.err" "cross: misses served"
expect_no_grep 'taken for stale pointers' "$WORK/cross.err" "cross: nothing taken for stale"
pass "a launch added after discovery reading two layers' weights: the unpredicted one loaded on demand, same output"
# From forward 5 on the last layer is skipped: no pass profiled after the first runs
# every unit where discovery saw them. After 8 such passes profiling plans from the one
# it timed (before, it waited for ever and nothing was offloaded).
run_pair skip --iters 18 --skip-last-from 5
expect_grep 'profiling: the last 8 passes did not follow the one discovery recorded .*planning from the passes timed so far' \
    "$WORK/skip.err" "skip: profiling gives up waiting"
expect_grep 'profiling: done, 1 pass\(es\)' "$WORK/skip.err" "skip: planned from one pass"
pass "passes shorter than the recorded one after the first profiled pass: planned from it after 8, the model streams, same output"
# From forward 4 on, the first profiled pass is already short: the last layer's event
# was never recorded, and timing the layer before it against it left
# cudaErrorInvalidResourceHandle for the program's cudaGetLastError (model.c checks
# after every forward). No pass is timed, so nothing is planned.
sim "$MODEL" "${ARGS[@]}" --iters 18 --skip-last-from 4 >"$WORK/skip4.plain" || fail "skip4: model without shim failed"
FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
    shim "$MODEL" "${ARGS[@]}" --iters 18 --skip-last-from 4 >"$WORK/skip4.shim" 2>"$WORK/skip4.err" \
    || { sed 's/^/    | /' "$WORK/skip4.err" >&2; fail "skip4: failed under the shim"; }
cmp -s "$WORK/skip4.plain" "$WORK/skip4.shim" || fail "skip4: output differs"
expect_grep 'profiling: the last 8 passes did not follow the one discovery recorded .*nothing is planned until one does' \
    "$WORK/skip4.err" "skip4: no pass timed"
pass "passes shorter than the recorded one from the first profiled pass on: none timed, no error left for the program, same output"
# A weight written after every forward (cudaMemcpy of one word into layer 0): each
# eviction finds it changed and copies it back; after the third, it stays loaded.
sim "$MODEL" "${ARGS[@]}" --iters 16 --rewrite 8 >"$WORK/rw.plain" || fail "rewrite: model without shim failed"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB shim "$MODEL" "${ARGS[@]}" --iters 16 --rewrite 8 \
    >"$WORK/rw.shim" 2>"$WORK/rw.err" || { sed 's/^/    | /' "$WORK/rw.err" >&2; fail "rewrite: failed"; }
cmp -s "$WORK/rw.plain" "$WORK/rw.shim" || fail "rewrite: output differs"
expect_grep 'unit\.0 changed between loads 3 times: it stays on the device from its next load on \(2\.0 MiB over the plan\)' \
    "$WORK/rw.err" "rewrite: kept resident"
expect_grep 'unload\(s\), 3 of them copied back' "$WORK/rw.err" "rewrite: three copies back"
# The first change is found by a hand-over (its copy back made on the device, behind the
# checksum); the next unloads wait on the host, so that the log can say where it changed.
expect_grep 'unit\.0 changed on the device: copied back to its host store \(where, at its next unload\)' \
    "$WORK/rw.err" "rewrite: copied back by a hand-over"
expect_grep 'unit\.0 changed on the device: region [0-9]+ \(1\.0 MiB\), bytes 4 to 7 differ from its host copy' \
    "$WORK/rw.err" "rewrite: where it changed"
pass "a weight rewritten after every forward: copied back at each of 3 evictions, then kept on the device; same output"
run_pair peek --peek 9
expect_grep 'residency: 2 copy\(ies\) or set\(s\) to or from units in host memory served there' "$WORK/peek.err" "peek: served"
pass "a weight row read back and one word written, while its unit is in host memory: both served there, unit not loaded; same output"
# Weights reached only through a pointer table (--ptr-arrays, each as large as a layer
# with --big-tables): the guard reads no device memory, so it could neither load them
# nor wait for the kernels reading them before an eviction; they stay resident while
# the rest of each layer streams. Each 1 MiB table weight holds a 2 MiB granule: 12 MiB
# resident, 2 slots of 2 MiB.
T=(--layers 6 --dim 512 --iters 12 --quiet --ptr-arrays --big-tables)
sim "$MODEL" "${T[@]}" >"$WORK/pt.plain" || fail "pointer tables: model without shim failed"
FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=17MiB shim "$MODEL" "${T[@]}" \
    >"$WORK/pt.shim" 2>"$WORK/pt.err" || { sed 's/^/    | /' "$WORK/pt.err" >&2; fail "pointer tables: failed"; }
cmp -s "$WORK/pt.plain" "$WORK/pt.shim" || fail "pointer tables: output differs"
expect_grep 'residency: [1-9][0-9.]* MiB of weights used by several units, or reached only through pointer arrays, stay resident' \
    "$WORK/pt.err" "pointer tables: resident"
expect_grep 'residency: [1-9] unit\(s\), ' "$WORK/pt.err" "pointer tables: layers stream"
pass "weights reached only through pointer arrays stay resident, the layers stream; same output"

# Memory the plan never saw (a 2 MiB scratch buffer from forward 9 on, 4 MiB layers):
# a resident layer is made to stream so that the allocation fits the budget; when
# even every layer streaming leaves no room, the allocation is served past the budget
# (the program runs as it does without FlexTensor), said once, and the verdict gives
# the most it went past (budget_after_plan.sh has more).
G=(--layers 6 --dim 1024 --iters 14 --quiet --scratch-from 9)
sim "$MODEL" "${G[@]}" >"$WORK/g.plain" || fail "grow: model without shim failed"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=14MiB FT_TRACE_FILE="$WORK/g.bin" \
    shim "$MODEL" "${G[@]}" >"$WORK/g.shim" 2>"$WORK/g.err" \
    || { sed 's/^/    | /' "$WORK/g.err" >&2; fail "grow: failed"; }
cmp -s "$WORK/g.plain" "$WORK/g.shim" || fail "grow: output differs"
# The trace keeps the plan as made; the unit made to stream is counted apart.
"$BUILD/bin/ft-trace" "$WORK/g.bin" >"$WORK/g.txt" 2>&1 || { cat "$WORK/g.txt" >&2; fail "grow: ft-trace refused the trace"; }
expect_grep ' 1 unit\(s\) made to stream' "$WORK/g.txt" "grow: demotion in the trace"
expect_grep 'allocating 2\.0 MiB would exceed the budget \(14\.0 MiB, 12\.1 MiB held with the slots full\): unit\.0 \(4\.0 MiB\) streams from now on' \
    "$WORK/g.err" "grow: demotion"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=10MiB shim "$MODEL" "${G[@]}" >"$WORK/g2.shim" 2>"$WORK/g2.err" \
    || { sed 's/^/    | /' "$WORK/g2.err" >&2; fail "grow: 10 MiB (two 4 MiB slots and 2 MiB more): the program failed"; }
cmp -s "$WORK/g.plain" "$WORK/g2.shim" || fail "grow: 10 MiB: output differs"
[ "$(grep -c 'cannot hold an allocation of 2\.0 MiB even with every weight' "$WORK/g2.err")" = 1 ] \
    || { sed 's/^/    | /' "$WORK/g2.err" >&2; fail "grow: 10 MiB: the warning, once"; }
expect_grep 'warning: the memory budget \(10\.0 MiB: FT_GPU_MEM_LIMIT.* it is served past the budget' "$WORK/g2.err" "grow: budget named"
expect_grep 'verdict: offloaded: .*; budget exceeded by up to 0\.[0-9] MiB after the plan \([1-9][0-9]* allocation\(s\) served past it' \
    "$WORK/g2.err" "grow: the verdict"
pass "an allocation past the budget after the plan: a resident layer streams from then on (same output); with nothing left to stream, it is served past the budget, said once (same output)"
# The same with a last unit four layers large (a language model's head; a tensor-
# parallel shard's replicated embeddings), kept resident by the plan. Making it stream
# gives back 16 MiB but raises what the two slots hold at most from 8 to 20 MiB; a
# layer gives back 4 MiB for nothing. Before, the largest unit went first and the
# slots were counted as 2 x 16 MiB: no allocation fitted any more, at 34 MiB (10
# layers) as at 26 MiB (6 layers, where only the head is left to stream), and the
# tensor-parallel run on two H200s failed that way.
for A in "34 10 unit\\.0 \\(4\\.0" "26 6 unit\\.5 \\(16\\.0"; do
    read -r mib nl want <<<"$A"
    H=(--layers "$nl" --dim 1024 --iters 14 --quiet --scratch-from 9 --big-last 4)
    sim "$MODEL" "${H[@]}" >"$WORK/h.plain" || fail "head ($mib MiB): model without shim failed"
    FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=${mib}MiB shim "$MODEL" "${H[@]}" >"$WORK/h.shim" 2>"$WORK/h.err" \
        || { sed 's/^/    | /' "$WORK/h.err" >&2; fail "head ($mib MiB): failed"; }
    cmp -s "$WORK/h.plain" "$WORK/h.shim" || fail "head ($mib MiB): output differs"
    n=$(grep -c 'would exceed the budget' "$WORK/h.err")
    [ "$n" = 1 ] || { grep 'would exceed' "$WORK/h.err" >&2; fail "head ($mib MiB): $n units made to stream, want 1"; }
    expect_grep "allocating 2\\.0 MiB would exceed the budget \\($mib\\.0 MiB, [0-9.]+ MiB held with the slots full\\): $want MiB\\) streams" \
        "$WORK/h.err" "head ($mib MiB): the unit made to stream"
done
pass "a head four layers large: a layer is made to stream rather than the head, and the head when it is all that is left (the slots counted by their largest units, not slots x the largest); same output"
# 7 MiB: 2 slots of 2 MiB, the shared table (1 MiB in a 2 MiB granule, counted with
# the non-weight memory) and the activations, which 6 MiB cannot hold.
LIMIT=6MiB
LIMIT=7MiB run_pair shared --shared
expect_grep 'residency: 1\.0 MiB of weights used by several units, or reached only through pointer arrays, stay resident' "$WORK/shared.err" "shared: resident"
expect_grep 'residency: (29|30) load\(s\), (28|29) of them prefetched and 1 on demand' "$WORK/shared.err" "shared: prefetched"
pass "a weight every layer reads stays resident, the rest streams (without that, its unit holds 4 MiB and 7 MiB holds no plan)"

# Non-weight memory at its peak while profiling: a 2 MiB scratch buffer allocated
# half-way through each forward and freed at its end is not there when the plan is
# made (a pass's first launch), yet the plan leaves room for it.
LIMIT=7MiB run_pair scratch --scratch
expect_grep 'plan \(memory mode' "$WORK/scratch.err" "scratch: plan"
FT_LOG_DIAGNOSTICS=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=7MiB shim "$MODEL" "${ARGS[@]}" --scratch \
    >/dev/null 2>"$WORK/scratch2.err" || fail "scratch: diagnostics run failed"
expect_grep 'device [0-9.]+ MiB \(other 2\.0[0-9] MiB\)' "$WORK/scratch2.err" "scratch: counted in the plan"
pass "a scratch buffer that lives only mid-pass is counted in the plan's non-weight memory (its peak while profiling)"
run_pair vary --iters 16 --vary 7
expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and 1 on demand' "$WORK/vary.err" "vary: prefetched"
pass "passes of two lengths (one more kernel per layer in every other forward): prefetches follow first touches where positions differ (1 miss; 15 when they followed positions only)"
FT_PINNED_MEMORY_MODE=alloc run_pair alloc
expect_grep 'moved to pinned host memory;' "$WORK/alloc.err" "alloc"
expect_no_grep 'registered in place' "$WORK/alloc.err" "alloc"
pass "FT_PINNED_MEMORY_MODE=alloc (cudaHostAlloc, not the default): same output"
FT_PINNED_MEMORY=0 run_pair pageable
expect_grep 'FT_PINNED_MEMORY=false: streamed weights live in pageable host memory' "$WORK/pageable.err" "pageable warning"
pass "FT_PINNED_MEMORY=0: same output, with a warning about speed"

# Prefetch: the streamed layers are copied in on a side stream ahead of use, so the
# step (virtual clock) is within 10% of the pipeline model's prediction. These timed
# runs prefetch on the application's thread (FT_PREFETCH_THREAD=false): the simulator
# keeps one host clock for all threads, so the prefetching thread's moves reach the
# device clock where the host's scheduling puts them (a CI run measured 3525 us
# against 3170 predicted at 2 GB/s, 3160 in every other run); the thread's path is
# checked for its outputs above (run_pair).
FT_PREFETCH_THREAD=false FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB shim "$MODEL" "${ARGS[@]}" --iters 14 --time \
    >"$WORK/t.out" 2>"$WORK/t.err" || fail "timed run failed"
predicted=$(sed -n 's/.*predicted step \([0-9.]*\) us against.*/\1/p' "$WORK/t.err" | head -1)
measured=$(sed -n 's/^iteration 13 step_us \([0-9.]*\)$/\1/p' "$WORK/t.out")
[ -n "$predicted" ] && [ -n "$measured" ] || fail "no prediction or no measurement"
expect_grep 'residency: [0-9]+ load\(s\), [1-9][0-9]* of them prefetched' "$WORK/t.err" "prefetches"
awk -v m="$measured" -v p="$predicted" 'BEGIN { exit !(m <= 1.10 * p) }' \
    || fail "step $measured us is more than 10% above the predicted $predicted us"
pass "prefetch: step $measured us against $predicted us predicted (within 10%)"

# Copies that matter (2 GB/s: a layer's copy takes longer than its compute; 1 GB/s: twice
# that): every streamed layer is copied in each pass (and dropped unchanged: its
# checksum is issued behind its last launch), and the model predicts the step. The
# prefetch is issued after the unit's first launch is enqueued, so the device computes
# while the host maps memory.
for gbps in 2 1; do
    FT_PREFETCH_THREAD=false FTSIM_H2D_GBPS=$gbps FTSIM_D2H_GBPS=$gbps FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
        shim "$MODEL" "${ARGS[@]}" --iters 14 --time >"$WORK/c.out" 2>"$WORK/c.err" || fail "$gbps GB/s: run failed"
    read -r cpred call < <(sed -n 's/.*predicted step \([0-9.]*\) us against \([0-9.]*\) us all resident.*/\1 \2/p' "$WORK/c.err" | head -1)
    cmeas=$(sed -n 's/^iteration 13 step_us \([0-9.]*\)$/\1/p' "$WORK/c.out")
    [ -n "$cpred" ] && [ -n "$cmeas" ] || fail "$gbps GB/s: no prediction or no measurement"
    awk -v m="$cmeas" -v p="$cpred" -v a="$call" 'BEGIN { exit !(p > 1.1 * a && m <= 1.05 * p && m >= 0.95 * p) }' \
        || fail "$gbps GB/s: step $cmeas us, predicted $cpred us (all resident $call us): not within 5%, or copies hidden"
    pass "copies at $gbps GB/s: step $cmeas us against $cpred us predicted (within 5%; $call us all resident)"
done

# The exit report's measured step (events at each pass's first launch, never waited
# for) agrees with the model's own timing of its iterations.
shim_step=$(sed -n 's/.*residency: measured step \([0-9.]*\) us (median of \([0-9]*\).*/\1 \2/p' "$WORK/t.err")
[ -n "$shim_step" ] || fail "no measured step in the exit report"
set -- $shim_step
[ "$2" -ge 3 ] || fail "measured step from only $2 pass(es)"
sed -n 's/^iteration \([0-9]*\) step_us \([0-9.]*\)$/\2/p' "$WORK/t.out" | sort -n >"$WORK/steps"
awk -v s="$1" '{ v[NR] = $1 } END { exit !(NR > 0 && s >= 0.99 * v[1] && s <= 1.01 * v[NR]) }' "$WORK/steps" \
    || fail "measured step $1 us outside the model's own step times ($(tr '\n' ' ' <"$WORK/steps"))"
pass "exit report: measured step $1 us over $2 passes, within the model's own step times"

# The exit report's view of what lies outside the budget: the device's memory in use
# less what FlexTensor holds, sampled at the first allocation, each profiled pass and
# inference passes. 4 MiB mapped through the driver's own calls (as NCCL maps its
# buffers) from forward 2 on appear there, from the first profiled pass.
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=20MiB shim "$MODEL" --layers 8 --dim 1024 --iters 10 --quiet \
    --outside-from 2 >"$WORK/o.out" 2>"$WORK/o.err" || { sed 's/^/    | /' "$WORK/o.err" >&2; fail "outside: failed"; }
sim "$MODEL" --layers 8 --dim 1024 --iters 10 --quiet --outside-from 2 | cmp -s - "$WORK/o.out" || fail "outside: output differs"
expect_grep "device memory outside FlexTensor's count \(in use on the device, less what FlexTensor holds\): 0\.0[0-9] MiB at the first sample, at most 4\.0[0-9] MiB \(from profiling pass 1 on\)" \
    "$WORK/o.err" "outside: 4 MiB from profiling on"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=20MiB shim "$MODEL" --layers 8 --dim 1024 --iters 10 --quiet \
    >/dev/null 2>"$WORK/o0.err" || fail "outside, without the 4 MiB: failed"
expect_grep "outside FlexTensor's count .*: 0\.0[0-9] MiB at the first sample, at most 0\.0[0-9] MiB" "$WORK/o0.err" "outside: nothing without it"
pass "exit report: 4 MiB the shim does not see, mapped from forward 2 on, found outside its count from the first profiled pass; 0 without"

# ft_get_gpu_memory_usage: before the plan (1), everything held is other bytes, within
# FT_SPILL's budget, the rest in host memory; after it (0), the parts add up, the streamed
# weights (6 of 1 MiB, each in a 2 MiB granule: what the device holds for them) are
# either loaded (at most the 2 slots) or in host memory, all within budget.
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB shim "$MODEL" "${ARGS[@]}" --usage \
    >/dev/null 2>"$WORK/u.err" || fail "run with --usage failed"
expect_grep '^usage after 0: total [0-9]* resident 0 slots 0 other [0-9]* unmapped 0 budget 0 \(before the plan\)$' \
    "$WORK/u.err" "usage before the plan, FT_SPILL=0: no budget held yet"
FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB shim "$MODEL" "${ARGS[@]}" --usage \
    >/dev/null 2>"$WORK/us.err" || fail "FT_SPILL=1 run with --usage failed"
line0=$(grep '^usage after 0:' "$WORK/us.err") || fail "no usage after the first forward"
awk '{ t=$5; r=$7; s=$9; o=$11; u=$13; b=$15
       if ($16 != "(before" || r != 0 || s != 0 || o != t) { print "not before the plan, or weights counted: " $0; exit 1 }
       if (b != 5 * 1048576 || t > b || t == 0) { print "not within FT_SPILL'"'"'s 5 MiB budget: " $0; exit 1 }
       if (u == 0) { print "nothing in host memory under a 5 MiB budget: " $0; exit 1 } }' \
    <<<"$line0" >&2 || fail "ft_get_gpu_memory_usage before the plan"
line=$(grep '^usage after 11:' "$WORK/u.err") || fail "no usage after the last forward"
awk '{ t=$5; r=$7; s=$9; o=$11; u=$13; b=$15
       if (t != r + s + o) { print "parts do not add up: " $0; exit 1 }
       if (s + u != 12 * 1048576) { print "streamed bytes not 6 granules of 2 MiB: " $0; exit 1 }
       if (s > 4 * 1048576 || s == 0) { print "loaded streamed bytes not in 1..2 granules: " $0; exit 1 }
       if (b != 5 * 1048576 || t > b) { print "not within the 5 MiB budget: " $0; exit 1 } }' \
    <<<"$line" >&2 || fail "ft_get_gpu_memory_usage"
sim "$MODEL" "${ARGS[@]}" --usage >/dev/null 2>"$WORK/u0.err" || fail "run without the shim failed"
expect_grep '^usage after 11: unavailable$' "$WORK/u0.err" "usage without FlexTensor"
pass "ft_get_gpu_memory_usage: ${line#usage after 11: }"

# cudaMemGetInfo and the driver's cuMemGetInfo (resolved by dlsym, as libraries do)
# report, once a plan streams, the budget as total and what is left of it as free: the
# budget less the usage above after the plan. Before the plan, and when no plan streams,
# the device's own answer, as without the shim (a program's start-up sizes itself from
# it: transformers' allocator warm-up failed on the budget's free; real_patterns.sh).
plain_total=$(sed -n 's/^meminfo after 0: free [0-9]* total \([0-9]*\)$/\1/p' "$WORK/u0.err")
[ -n "$plain_total" ] && [ "$plain_total" -gt 5242880 ] || fail "meminfo without the shim: $(grep '^meminfo' "$WORK/u0.err")"
grep -q "^meminfo after 0: free [0-9]* total $plain_total\$" "$WORK/u.err" || fail "runtime meminfo before the plan: $(grep '^meminfo after 0' "$WORK/u.err"), expected the device's total $plain_total"
grep -q "^cumeminfo after 0: free [0-9]* total $plain_total\$" "$WORK/u.err" || fail "driver meminfo before the plan: $(grep '^cumeminfo after 0' "$WORK/u.err")"
left=$((5242880 - $(awk '{ print $5 }' <<<"$line")))
grep -q "^meminfo after 11: free $left total 5242880$" "$WORK/u.err" || fail "runtime meminfo after the plan: $(grep '^meminfo after 11' "$WORK/u.err"), expected free $left"
grep -q "^cumeminfo after 11: free $left total 5242880$" "$WORK/u.err" || fail "driver meminfo after the plan: $(grep '^cumeminfo after 11' "$WORK/u.err")"
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_MAX_GPU_MEM_FRACTION=0.5 shim "$MODEL" "${ARGS[@]}" --usage \
    >/dev/null 2>"$WORK/f.err" || fail "run with FT_MAX_GPU_MEM_FRACTION failed"
grep -q "^meminfo after 11: free [0-9]* total $plain_total\$" "$WORK/f.err" \
    || fail "FT_MAX_GPU_MEM_FRACTION=0.5 (the model fits, nothing streams): $(grep '^meminfo after 11' "$WORK/f.err"), expected the device's total $plain_total"
pass "cudaMemGetInfo / cuMemGetInfo: budget as total and free $left once the plan streams; the device's before it, and with a budget the model fits in"

# The trace's RESIDENCY record: what the exit report said, in text and JSON; a payload
# whose counts disagree (more prefetched than loads) is refused.
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB FT_TRACE_FILE="$WORK/r.bin" \
    shim "$MODEL" "${ARGS[@]}" >/dev/null 2>"$WORK/r.err" || fail "traced run failed"
loads=$(sed -n 's/.*residency: \([0-9]*\) load(s), \([0-9]*\) of them prefetched and \([0-9]*\) on demand.*/\1 \2 \3/p' "$WORK/r.err")
[ -n "$loads" ] || fail "no residency line in the exit report"
"$BUILD/bin/ft-trace" "$WORK/r.bin" >"$WORK/r.txt" || fail "ft-trace on the residency trace"
set -- $loads
expect_grep "^  $1 load\(s\), $2 prefetched, $3 on demand \(misses\)" "$WORK/r.txt" "ft-trace residency"
pred=$(sed -n 's/.*predicted step \([0-9.]*\) us against.*/\1/p' "$WORK/r.err" | head -1)
[ -n "$pred" ] || fail "no prediction in the log"
expect_grep "^  measured step [0-9.]+ us \(median of [1-9][0-9]*\), predicted ${pred//./\\.} us\$" "$WORK/r.txt" "ft-trace step"
expect_grep '^  0 unload\(s\) copied back; 0 stale address\(es\) skipped; 0 copy\(ies\) or set\(s\) served from host memory; 0 unit\(s\) made to stream by allocations; FT_SPILL moves before the plan: 0 in, 0 out$' \
    "$WORK/r.txt" "ft-trace residency counts"
# The passes the engine followed after discovery (TRACKING): 12 forwards, 2 of them
# discovery's and one begun before it ended.
expect_grep '^  passes after +start at launch 0 \(_Z10model_gemvPKjS0_Pji\) on region [0-9]+ \(unit\.0\), or a kernel not in the pass touching it; (8|9) starts, ' \
    "$WORK/r.txt" "ft-trace pass tracking"
"$BUILD/bin/ft-trace" --json "$WORK/r.bin" >"$WORK/r.json" || fail "ft-trace --json"
python3 - "$WORK/r.json" "$1" "$2" "$3" "$pred" <<'PY' || fail "JSON residency differs from the exit report"
import json, sys
r = json.load(open(sys.argv[1]))["residency"]
assert [r["loads"], r["prefetched"], r["misses"]] == [int(x) for x in sys.argv[2:5]], r
assert r["measured_steps"] > 0 and r["measured_step_ns"] > 0, r
assert abs(r["predicted_step_ns"] / 1000 - float(sys.argv[5])) < 0.051, (r, sys.argv[5])
assert [r["copied_back"], r["stale_skipped"], r["host_copies"], r["made_to_stream"]] == [0, 0, 0, 0], r
assert r["outside_samples"] > 0 and r["outside_max_bytes"] >= r["outside_last_bytes"], r
PY
# The exit report's memory outside the count, in the trace as well (the --outside-from run)
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=20MiB FT_TRACE_FILE="$WORK/o.bin" shim "$MODEL" --layers 8 --dim 1024 \
    --iters 10 --quiet --outside-from 2 >/dev/null 2>&1 || fail "outside, traced: failed"
"$BUILD/bin/ft-trace" "$WORK/o.bin" >"$WORK/o.txt" || fail "ft-trace on the outside trace"
expect_grep "^  device memory outside FlexTensor's count: 0 B at the first sample, at most 4\.0 MiB, 4\.0 MiB at the last of [0-9]+$" \
    "$WORK/o.txt" "ft-trace: memory outside the count"
python3 - "$WORK/r.bin" "$WORK/bad.bin" <<'PY' || fail "patching the trace"
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
off = 16
while True:
    t, _, n = struct.unpack_from("<HHI", b, off)
    if t == 12:
        struct.pack_into("<Q", b, off + 16, 1 << 40)  # prefetched
    if t == 0xFFFF:
        struct.pack_into("<I", b, off + 16, zlib.crc32(bytes(b[:off])))
        break
    off += 8 + n
open(sys.argv[2], "wb").write(b)
PY
set +e
"$BUILD/bin/ft-trace" "$WORK/bad.bin" >"$WORK/bad.out" 2>"$WORK/bad.err"
rc=$?
set -e
[ $rc -eq 1 ] && [ ! -s "$WORK/bad.out" ] || fail "inconsistent RESIDENCY record: exit $rc or a partial report"
expect_grep 'inconsistent RESIDENCY record at byte [0-9]+: 1099511627776 prefetched and [0-9]+ unloads of [0-9]+ loads' \
    "$WORK/bad.err" "inconsistent RESIDENCY record"
pass "trace: RESIDENCY record as in the exit report ($1 loads, $2 prefetched, $3 misses; memory outside the count), TRACKING's pass starts; inconsistent counts refused"
