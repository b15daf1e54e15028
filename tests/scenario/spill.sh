# FT_SPILL: the budget holds from the first allocation. A model larger than the
# simulated device (64 MiB of weights on a 41 MiB device, a 40 MiB budget) cannot even
# be loaded without FlexTensor; with it, the weights past the budget start in host
# memory, launches and copies fault them in (moving the least recently touched ones
# out), and after the plan the engine streams them: the output is that of a run on a
# device large enough. Also with three threads, and when the plan streams nothing.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 16 --dim 1024 --iters 12 --quiet)
sim "$MODEL" "${ARGS[@]}" >"$WORK/plain" || fail "model on a large device failed"
FTSIM_DEVICE_MEM=41MiB sim "$MODEL" "${ARGS[@]}" >"$WORK/small" 2>&1 && fail "the model fits 41 MiB without FlexTensor: the test proves nothing"
grep -q 'out of memory' "$WORK/small" || fail "without FlexTensor: $(tail -1 "$WORK/small")"

# FT_SPILL's default (lib.sh sets 0 for the other scripts): on.
(unset FT_SPILL; FTSIM_DEVICE_MEM=41MiB FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB \
    FT_TRACE_FILE="$WORK/spill.bin" shim "$MODEL" "${ARGS[@]}" --usage >"$WORK/out" 2>"$WORK/err") \
    || { sed 's/^/    | /' "$WORK/err" >&2; fail "under FT_SPILL: the model failed"; }
cmp -s "$WORK/plain" "$WORK/out" || fail "under FT_SPILL: output differs"
expect_grep 'FT_SPILL: allocations past the budget \(40\.0 MiB\) start in host memory' "$WORK/err" "spill announced"
expect_grep 'residency: [0-9]+ unit\(s\), .* moved to pinned host memory' "$WORK/err" "streamed after the plan"
# A unit that came from host memory is copied back at its first eviction (there is no
# device checksum to compare with yet), which gives its reference; then it is dropped.
expect_grep 'unload\(s\), 1 of them copied back' "$WORK/err" "copied back once"
expect_grep 'FT_SPILL: before the plan, [1-9][0-9]* allocation\(s\) moved in and [1-9][0-9]* out' "$WORK/err" "moves reported"
# The host memory held once the plan streams is the streamed units' bytes: FT_SPILL's
# host copies of allocations back on the device are taken over by the units or released
# (on the H200 they stayed pinned beside the units' own: 17 GB held for 9 GB streamed).
streamed=$(sed -n 's/.*residency: [0-9]* unit(s), \([0-9.]*\) MiB, moved to pinned host memory.*/\1/p' "$WORK/err")
held=$(sed -n 's/.*host memory: \([0-9.]*\) MiB of pinned host memory.* held by FlexTensor after the switch.*/\1/p' "$WORK/err")
[ -n "$streamed" ] && [ "$held" = "$streamed" ] || fail "host memory after the switch: ${held:-none} MiB held for ${streamed:-none} MiB streamed"
expect_grep 'FT_SPILL: [0-9.]+ MiB of host copies of allocations back on the device released' "$WORK/err" "host copies released"
expect_grep 'residency: the switch to the plan took [0-9.]+ ms' "$WORK/err" "the switch's time"
# Before the plan the application sees the device, as without the shim (FT_SPILL
# serves what does not fit); once the plan streams, the budget.
line=$(grep '^meminfo after 0:' "$WORK/err")
awk '{ if (!($7 > 41943040)) exit 1 }' <<<"$line" || fail "meminfo before the plan: $line"
line=$(grep '^meminfo after 11:' "$WORK/err")
awk '{ if (!($7 == 41943040)) exit 1 }' <<<"$line" || fail "meminfo after the plan: $line"
moves=$(sed -n 's/.*FT_SPILL: before the plan, \([0-9]*\) allocation(s) moved in and \([0-9]*\) out.*/\1 in, \2 out/p' "$WORK/err")
"$BUILD/bin/ft-trace" "$WORK/spill.bin" >"$WORK/spill.txt" || fail "ft-trace on the FT_SPILL trace"
expect_grep "FT_SPILL moves before the plan: $moves\$" "$WORK/spill.txt" "moves in the trace"
# Profiling takes the moves (synchronous, before the plan) out of the units' times: the
# plan's prediction is the step the engine then runs (it was 10% over with the moves in).
expect_grep "profiling: [0-9.]+ ms of FT_SPILL moves taken out of the units' times" "$WORK/err" "moves taken out"
step=$(sed -n 's/.*measured step \([0-9.]*\) us .*the plan predicted \([0-9.]*\) us.*/\1 \2/p' "$WORK/err")
awk '{ d = ($2 - $1) / $1; if (d < 0) d = -d; exit !($1 > 0 && d <= 0.05) }' <<<"$step" \
    || fail "under FT_SPILL: measured step and the plan's prediction differ by more than 5% ($step)"
pass "64 MiB of weights on a 41 MiB device (40 MiB budget, FT_SPILL by default): loaded and run, same output; $line; moves $moves (trace too); step measured and predicted (us): $step"

# The moves cost host time besides their copies (pinning, mapping, setting access): the
# stream waits for all of it, and profiling takes out the gap it leaves, not the copies'
# time alone. With the host costs of the H200 machines (cuMemSetAccess 0.5 ms as on the
# two-H200 one while copies ran, a map or unmap 20 us, a create or release 50 us,
# pinning 0.46 ms a MiB) the plan predicted 31.9 ms for a 22.5 ms step when only
# the copies were taken out (on the H200: a 94 ms all-resident step for a real 17.9).
FTSIM_VMM_ACCESS_NS=500000 FTSIM_VMM_MAP_NS=20000 FTSIM_VMM_CREATE_NS=50000 FTSIM_PIN_NS_PER_MIB=464000 FTSIM_DEVICE_MEM=41MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/acc.out" 2>"$WORK/acc.err" || { sed 's/^/    | /' "$WORK/acc.err" >&2; fail "moves with host costs: failed"; }
cmp -s "$WORK/plain" "$WORK/acc.out" || fail "moves with host costs: output differs"
step=$(sed -n 's/.*measured step \([0-9.]*\) us .*the plan predicted \([0-9.]*\) us.*/\1 \2/p' "$WORK/acc.err")
# Within 12%: each load's 0.5 ms cuMemSetAccess on the prefetching thread shows in the
# step where a pass's first launches wait for a move (copies and sets do not wait for
# moves they do not touch: the pass's input copy used to absorb that wait between
# passes), and how long those waits are depends on the threads' timing: 4.0% over
# before in every build, 6.6% since in plain and ASan builds, 9.0% under TSan.
# Profiling's error this guards against was 42% (31.9 ms for 22.5).
awk '{ d = ($2 - $1) / $1; if (d < 0) d = -d; exit !($1 > 0 && d <= 0.12) }' <<<"$step" \
    || fail "moves with the H200's host costs: measured step and prediction differ by more than 12% ($step)"
pass "moves whose pinning and mapping cost host time (the H200's figures): the gaps they leave are taken out of the profile; step measured and predicted (us): $step"

# The whole run's peak of physical device memory, as read from outside the process
# (the simulator's FTSIM_REPORT_PEAK, nvidia-smi's view), within the budget. With dim
# 768 each 2.25 MiB weight holds a 4 MiB granule; with --pad-odd, units of two sizes
# alternate, so a load finds spare physical memory of the wrong size; with
# --scratch-from, forwards allocate a 2 MiB buffer mid-pass that profiling never saw,
# so a resident unit is made to stream after the plan. Before the budget counted whole
# granules and sized the bandwidth measurement to the room left, the first two peaked
# at 144 and 160 MiB for a 20 MiB budget; before a load released the spares it cannot
# use, the third at 24 MiB. Before an allocation was admitted with every slot counted
# full (one slot held a smaller unit, or was empty, at that moment) the fifth went
# 1164 KiB over; before frees under way counted as held until their memory was back
# (another thread's cudaFree was synchronising the device), the fourth went 1172 KiB
# over in half the runs (the H200: 4706 MiB held against a 4608 MiB budget). The sixth
# has a head four layers large: a layer, then the head, are made to stream. The
# simulated CUPTI keeps its activity records in device memory (about 9 MiB, as CUPTI
# 12.0 Update 1 and later) unless told to use pinned host memory: before FlexTensor
# asked for that, the first case peaked at 29.3 MiB while profiling. The last two
# allocate a workspace through the driver's cuMemAlloc in their first forward, as
# cuBLAS does, which the shim cannot start in host memory: room is made for it by
# moving others out (the first time, in the last case, with nothing spilled yet).
# Before, they peaked at 24.1 MiB of 22 (the H200 pair: 42 MiB over in its first
# forward) and 200 MiB of 70 (the bandwidth measurement's
# 128 MiB buffer was sized to the room left only when there was some).
# Each case must stream within its 14 forwards. With three threads, profiling counted
# the pass starts of every other lane together and abandoned each timed pass at the
# third (two other starts a forward): no plan in 2 runs of 20 under four CPU hogs, 0
# of 50 since it counts per lane. Their threads also start each forward together
# (--lockstep), so that a loaded host cannot let one thread run most of its forwards
# before the plan.
for A in "22 --layers 16 --dim 1024" "22 --layers 8 --dim 768 --threads 2 --lockstep" "22 --layers 8 --dim 1024 --pad-odd" \
    "19 --layers 16 --dim 1024 --scratch-from 8 --threads 2 --lockstep" "21 --layers 16 --dim 1024 --scratch-from 8 --pad-odd" \
    "30 --layers 10 --dim 1024 --scratch-from 8 --big-last 4 --threads 2 --lockstep" \
    "22 --layers 16 --dim 1024 --drv-workspace 4" "70 --layers 16 --dim 1024 --drv-workspace 8 --threads 3 --lockstep"; do
    read -r -a P <<<"$A"
    mib=${P[0]}
    P=("${P[@]:1}")
    sim "$MODEL" "${P[@]}" --iters 14 --quiet >"$WORK/pk.plain" || fail "peak ($A): run without the shim failed"
    FTSIM_REPORT_PEAK=1 FTSIM_TIME_SCALE=0.01 FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 \
        FT_GPU_MEM_LIMIT=${mib}MiB shim "$MODEL" "${P[@]}" --iters 14 --quiet >"$WORK/pk.out" 2>"$WORK/pk.err" \
        || { sed 's/^/    | /' "$WORK/pk.err" >&2; fail "peak ($A): failed"; }
    cmp -s "$WORK/pk.plain" "$WORK/pk.out" || fail "peak ($A): output differs"
    expect_grep 'residency: [0-9]+ unit\(s\), .* moved to pinned host memory' "$WORK/pk.err" "peak ($A): streamed"
    peak=$(sed -n 's/^simcuda: device 0: peak physical memory \([0-9]*\) bytes.*/\1/p' "$WORK/pk.err")
    [ -n "$peak" ] || fail "peak ($A): the simulator reported no peak"
    [ "$peak" -le $((mib << 20)) ] || fail "peak ($A): $peak bytes, over the $mib MiB budget"
    peaks+="$((peak >> 10)) KiB of $mib MiB (${P[*]}); "
done
pass "FT_SPILL: whole-run peak of physical device memory within the budget, same output: ${peaks%; }"
# Four threads allocating at once after a barrier, then faulting weights in while the
# first to finish free their buffers: the engine's count must hold allocations decided
# but not yet tracked, spilled ones too, and frees under way. Before, it ran 2-4 MiB
# short and the peak went past 30 MiB in about 4 runs of 10; 4 runs here.
R=(--layers 8 --dim 1024 --threads 4 --race-alloc 2 --iters 6 --quiet)
sim "$MODEL" "${R[@]}" >"$WORK/race.plain" || fail "race: run without the shim failed"
for i in 1 2 3 4; do
    FTSIM_REPORT_PEAK=1 FTSIM_TIME_SCALE=0.01 FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=30MiB \
        shim "$MODEL" "${R[@]}" >"$WORK/race.out" 2>"$WORK/race.err" || { sed 's/^/    | /' "$WORK/race.err" >&2; fail "race: failed"; }
    cmp -s "$WORK/race.plain" "$WORK/race.out" || fail "race: output differs"
    peak=$(sed -n 's/^simcuda: device 0: peak physical memory \([0-9]*\) bytes.*/\1/p' "$WORK/race.err")
    [ -n "$peak" ] && [ "$peak" -le $((30 << 20)) ] || fail "race: run $i peaked at ${peak:-?} bytes, over the 30 MiB budget"
done
pass "FT_SPILL with four threads allocating and freeing at once: the peak within 30 MiB in 4 runs, same output"

# A thread that ends early frees allocations held in host memory while another thread's
# discovery hashes them (FT_TEST_HASH_PAUSE_US draws each snapshot out to about 90 ms).
# A freed region leaves the region table before discovery lets go of it: found through
# that table, the allocation looked as if on the device, and the checksum read its
# unmapped addresses (an illegal address in ft_checksum, once in CI; 2 runs of 3 here).
E=(--layers 8 --dim 1024 --threads 2 --race-alloc 4 --early-end 1 --iters 6 --quiet)
sim "$MODEL" "${E[@]}" >"$WORK/early.plain" || fail "early end: run without the shim failed"
for i in 1 2 3; do
    FT_TEST_HASH_PAUSE_US=3000 FTSIM_TIME_SCALE=0.01 FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=22MiB \
        shim "$MODEL" "${E[@]}" >"$WORK/early.out" 2>"$WORK/early.err" || { sed 's/^/    | /' "$WORK/early.err" >&2; fail "early end: run $i failed"; }
    cmp -s "$WORK/early.plain" "$WORK/early.out" || fail "early end: run $i: output differs"
    expect_no_grep "cannot read region|illegal address" "$WORK/early.err" "early end: run $i: a hash that could not read"
done
pass "FT_SPILL: a thread frees allocations in host memory while another's discovery hashes them: read where they are, in 3 runs, same output"

# Three threads on three streams: the moves before the plan are synchronous, and a
# unit used by several streams waits for all of them before it goes (run a few times:
# the race this guards against showed in about one run in four).
sim "$MODEL" "${ARGS[@]}" --threads 3 >"$WORK/plain3" || fail "3 threads without the shim"
for i in 1 2 3 4 5; do
    FTSIM_TIME_SCALE=0.01 FTSIM_DEVICE_MEM=41MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 \
        FT_GPU_MEM_LIMIT=40MiB shim "$MODEL" "${ARGS[@]}" --threads 3 >"$WORK/out3" 2>"$WORK/err3" \
        || { sed 's/^/    | /' "$WORK/err3" >&2; fail "3 threads, run $i: failed"; }
    cmp -s "$WORK/plain3" "$WORK/out3" || fail "3 threads, run $i: output differs"
done
pass "3 threads on 3 streams under FT_SPILL, 5 runs: same output"

# Two threads whose forwards read a far layer's weight from forward 10 on (launches not
# in the recorded pass): each thread's pass leaves the recorded sequence on its own.
# When that state was shared, one thread's pass start put the other's back on script,
# and a real read was taken for a stale address (2 of 6 runs faulted).
sim "$MODEL" "${ARGS[@]}" --threads 2 --iters 14 --cross-from 10 >"$WORK/plainx" || fail "cross, 2 threads, without the shim"
for i in 1 2 3 4 5; do
    FTSIM_TIME_SCALE=0.01 FTSIM_DEVICE_MEM=41MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 \
        FT_GPU_MEM_LIMIT=40MiB shim "$MODEL" "${ARGS[@]}" --threads 2 --iters 14 --cross-from 10 \
        >"$WORK/outx" 2>"$WORK/errx" || { sed 's/^/    | /' "$WORK/errx" >&2; fail "cross, 2 threads, run $i: failed"; }
    cmp -s "$WORK/plainx" "$WORK/outx" || fail "cross, 2 threads, run $i: output differs"
done
pass "2 threads reading far layers' weights after discovery under FT_SPILL, 5 runs: same output"

# A budget under the smallest plan, one slot's (a unit of 4 MiB): nothing can stream, so
# what was spilled comes back (over the budget, with a warning) and the model runs on.
FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=3MiB \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/out4" 2>"$WORK/err4" \
    || { sed 's/^/    | /' "$WORK/err4" >&2; fail "infeasible budget: failed"; }
cmp -s "$WORK/plain" "$WORK/out4" || fail "infeasible budget: output differs"
expect_grep 'FT_SPILL: the plan streams nothing: [0-9.]+ MiB brought back to the device, over the budget' "$WORK/err4" "restore warning"
pass "a budget no plan fits: the spilled weights come back with a warning, same output"

# Between one slot's least and two slots' (6 MiB): every unit streams through one slot,
# on demand, within the budget; same output.
FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=6MiB \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/out6" 2>"$WORK/err6" \
    || { sed 's/^/    | /' "$WORK/err6" >&2; fail "one slot: failed"; }
cmp -s "$WORK/plain" "$WORK/out6" || fail "one slot: output differs"
expect_grep 'warning: plan: one slot: the budget 6\.0 MiB' "$WORK/err6" "one slot"
expect_grep 'verdict: offloaded: 16 of 16 units stream' "$WORK/err6" "one slot"
pass "a budget under two slots (6 MiB): one slot, every unit streamed on demand, same output"

# Profiling cannot start (CUDA events refused: FTSIM_FAIL_EVENT; no units at all, as the
# H100's jax_fraction, takes the same way): no plan will come, so the engine goes off and
# what FT_SPILL holds comes back to the device, once, said. Before, the engine stayed in
# planning with FT_SPILL on for the rest of the run, nothing brought back (a model of 12
# layers under 16 MiB: 237 moves in and 237 out, against 25; on the H100, XLA's arena
# read over the link from host memory until the time limit).
FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=6MiB FTSIM_FAIL_EVENT=5 FTSIM_FAIL_PERSIST=1 \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/out7" 2>"$WORK/err7" \
    || { sed 's/^/    | /' "$WORK/err7" >&2; fail "no events: failed"; }
cmp -s "$WORK/plain" "$WORK/out7" || fail "no events: output differs"
expect_grep 'FT_SPILL: profiling could not start: [0-9.]+ MiB brought back to the device, over the budget' "$WORK/err7" \
    "no events"
expect_grep 'verdict: no plan: profiling could not start \(no CUDA events\)' "$WORK/err7" "no events"
pass "profiling cannot start (no CUDA events): FT_SPILL's allocations brought back, the engine off, same output"

# The same with the device too small for what the plan would keep: what does not fit
# stays in host memory, brought in on use.
FTSIM_DEVICE_MEM=41MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=3MiB \
    shim "$MODEL" "${ARGS[@]}" >"$WORK/out5" 2>"$WORK/err5" \
    || { sed 's/^/    | /' "$WORK/err5" >&2; fail "infeasible budget, small device: failed"; }
cmp -s "$WORK/plain" "$WORK/out5" || fail "infeasible budget, small device: output differs"
expect_grep 'FT_SPILL: the device has no room for [0-9.]+ MiB more: it stays in host memory' "$WORK/err5" "stays-spilled warning"
[ "$(grep -c 'plan: the memory budget' "$WORK/err5")" = 1 ] || fail "infeasible budget, small device: planned more than once"
pass "a budget no plan fits on a device too small for the model: what cannot come back stays in host memory, same output"

# Before the plan, an allocation larger than the budget itself (a 12 MiB driver
# workspace under 10 MiB): FT_SPILL moves everything it can out, then lets it through
# past the budget (refusing it would end the program), said once; the verdict gives
# the most the process went past the budget before the plan.
W=(--layers 6 --dim 1024 --iters 10 --quiet --drv-workspace 12)
sim "$MODEL" "${W[@]}" >"$WORK/ws.plain" || fail "workspace past the budget: model without shim failed"
# Without host-located memory (FTSIM_HOST_VMM=0): with it, the part of the workspace the
# budget cannot hold is there instead (below).
FTSIM_HOST_VMM=0 FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=10MiB shim "$MODEL" "${W[@]}" >"$WORK/ws.out" 2>"$WORK/ws.err" \
    || { sed 's/^/    | /' "$WORK/ws.err" >&2; fail "workspace past the budget: failed"; }
cmp -s "$WORK/ws.plain" "$WORK/ws.out" || fail "workspace past the budget: output differs"
[ "$(grep -c 'FT_SPILL: nothing more can leave the device' "$WORK/ws.err")" = 1 ] || fail "workspace past the budget: not said once"
expect_grep 'verdict: .*; budget exceeded by up to [0-9.]+ MiB before the plan \(FT_SPILL could move nothing more out for [1-9][0-9]* call\(s\)\)' \
    "$WORK/ws.err" "workspace past the budget: the verdict"
# With host-located memory, the workspace (served in pieces: over half the budget) has
# what the budget cannot hold of it there, read over the link: the budget holds.
FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=10MiB FTSIM_REPORT_PEAK=1 shim "$MODEL" "${W[@]}" \
    >"$WORK/wsh.out" 2>"$WORK/wsh.err" || { sed 's/^/    | /' "$WORK/wsh.err" >&2; fail "workspace in host memory: failed"; }
cmp -s "$WORK/ws.plain" "$WORK/wsh.out" || fail "workspace in host memory: output differs"
expect_grep 'an allocation of 12\.0 MiB, past the budget before the plan: [0-9.]+ MiB of it in host memory' "$WORK/wsh.err" \
    "workspace in host memory"
expect_no_grep 'budget exceeded' "$WORK/wsh.err" "workspace in host memory: the budget holds"
# A 40 MiB one on a host taken for 128 MiB (FT_TEST_HOST_MEM): more than a quarter of
# the host's memory is never held there (XLA's arena is 75% of the device: pinned, it
# would starve the host); the weights' 24 MiB may go, never the 40 (before: 65 MiB
# pinned at most).
W40=(--layers 6 --dim 1024 --iters 10 --quiet --drv-workspace 40)
sim "$MODEL" "${W40[@]}" >"$WORK/ws40.plain" || fail "40 MiB workspace: model without shim failed"
FT_TEST_HOST_MEM=134217728 FTSIM_DEVICE_MEM=128MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=10MiB shim "$MODEL" "${W40[@]}" \
    >"$WORK/ws40.out" 2>"$WORK/ws40.err" || { sed 's/^/    | /' "$WORK/ws40.err" >&2; fail "40 MiB workspace: failed"; }
cmp -s "$WORK/ws40.plain" "$WORK/ws40.out" || fail "40 MiB workspace: output differs"
peak=$(sed -n 's/.*host memory: at most \([0-9.]*\) MiB of pinned host memory.*/\1/p' "$WORK/ws40.err")
awk -v p="${peak:-none}" 'BEGIN { exit !(p != "none" && p + 0 < 40) }' || fail "40 MiB workspace: ${peak:-no} MiB of host memory at most"
pass "before the plan, an allocation larger than the budget goes through past it (without host-located memory; with it, the part the budget cannot hold is there and the budget holds): same output, said once, the excess in the verdict; one over a quarter of the host's memory never held there (${peak} MiB at most, the weights')"

# Warm-up kernels before the weights exist (discovery starts over): the faults go on
# until the plan, then the engine streams.
sim "$MODEL" "${ARGS[@]}" --prologue >"$WORK/plain6" || fail "--prologue without the shim"
FTSIM_DEVICE_MEM=43MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB \
    shim "$MODEL" "${ARGS[@]}" --prologue >"$WORK/out6" 2>"$WORK/err6" \
    || { sed 's/^/    | /' "$WORK/err6" >&2; fail "--prologue under FT_SPILL: failed"; }
cmp -s "$WORK/plain6" "$WORK/out6" || fail "--prologue under FT_SPILL: output differs"
expect_grep 'touch no weight.*starting over' "$WORK/err6" "restart"
expect_grep 'residency: [0-9]+ unit\(s\), .* moved to pinned host memory' "$WORK/err6" "streamed after the plan"
pass "warm-up kernels before the weights, under FT_SPILL: discovery starts over, the model streams, same output"

# Weights reached only through pointer arrays (a grouped GEMM's table of 1 MiB tables,
# big enough to be virtual memory, so spillable): before the plan, the tables that a
# launch's small argument buffers point to are read (from host memory when spilled
# themselves) and faulted in with the launch's other allocations. Before, every run
# faulted in the kernel reading through the table.
PA=(--layers 6 --dim 512 --iters 12 --quiet --ptr-arrays --big-tables)
sim "$MODEL" "${PA[@]}" >"$WORK/plain7" || fail "pointer arrays without the shim"
for b in 5 8; do
    FTSIM_TIME_SCALE=0.002 FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=${b}MiB \
        shim "$MODEL" "${PA[@]}" >"$WORK/out7" 2>"$WORK/err7" \
        || { sed 's/^/    | /' "$WORK/err7" >&2; fail "pointer arrays under FT_SPILL ($b MiB): failed"; }
    cmp -s "$WORK/plain7" "$WORK/out7" || fail "pointer arrays under FT_SPILL ($b MiB): output differs"
    expect_grep 'FT_SPILL: before the plan, [1-9][0-9]* allocation\(s\) moved in' "$WORK/err7" "pointer arrays ($b MiB): moves"
done
pass "weights reached only through pointer arrays, spilled before the plan (5 and 8 MiB budgets): faulted in through the tables, same output"
