# The ways real programs made their weights and ran their forwards on the H200, as the
# example model plays them (bench/RESULTS.md, the conformance runs): weights written by
# kernels on the device after the first launch (`with torch.device("cuda")`,
# --init-kernel), weights copied in after unrelated kernels ran (a framework's warm-up,
# --load-after-launch), decode steps with a KV cache grown every step (transformers'
# DynamicCache, --grow-cache; discovery_kvcache.sh checks that its pass is found), and
# both of the first and last; norm weights and biases packed in a small-pool segment
# (--small-weights); a compiler timing one kernel before the loop (--autotune);
# weights allocated through the driver API (--drv-alloc); the first weight initialised
# three times (--init-twice) or twice by two kernels (--init-other), or every weight
# filled twice, several to a segment (--init-refill --segments); weights in memory the
# program maps itself, a mapping a tensor (--own-vmm), chunks of a pool end to end
# (--own-vmm-pool, XLA's), or exported handles (--own-vmm-export); a stale address off any
# tensor's alignment in three kernels of every layer (--stale-rope); a launcher asking
# pointer attributes before each launch (--ptr-query); activations in the room after
# the weights of a segment (--room-from), reached at two pointers from a far layer
# (--room-pair).
# Under a budget of a third of the weights with default
# settings: the same output as without the shim, no crash, one verdict; with FT_SPILL
# off too, with two threads, and with a bound that makes FlexTensor stand down in the
# run. Discovery finds every weight in the first two (12 units, and the plan streams):
# a region first written by a kernel that the passes never run is made by the
# program's initialisation, and a run of launches touching no candidate after copies
# into new regions starts discovery over with them.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --iters 20 --quiet)

# run NAME ARGS -- ENV...: lib.sh's compare_run at a third of the weights.
run() { compare_run "$@" FT_GPU_MEM_LIMIT=16MiB; }

for pattern in init-kernel load-after-launch grow-cache; do
    for spill in 1 0; do
        run $pattern-$spill --$pattern -- FT_SPILL=$spill
    done
done
run both --init-kernel --grow-cache -- FT_SPILL=1
# Weights far below FT_VMM_MIN_SIZE (every layer's two vectors, 4 KiB each) packed in a
# 2 MiB segment, as PyTorch's small pool holds norm weights and biases: the segment is
# read by every layer, so it cannot stream with one of them; it stays on the device
# while the layers' matrices stream (at 1/3 of the weights, and at 12 MiB where every
# unit streams), the same output.
for spill in 1 0; do
    run small-weights-$spill --small-weights -- FT_SPILL=$spill
    expect_grep 'discovery: done, 1 iteration\(s\), 12 units, 50\.0 MiB of weights' "$WORK/small-weights-$spill.err" \
        "small-weights"
    expect_grep 'verdict: offloaded: 1[12] of 12 units stream' "$WORK/small-weights-$spill.err" "small-weights"
done
compare_run small-weights-all --small-weights -- FT_GPU_MEM_LIMIT=12MiB
expect_grep 'residency: 12 unit\(s\), 48\.0 MiB, moved to pinned host memory' "$WORK/small-weights-all.err" \
    "small-weights, every unit streamed"
# The one region alive at the first launch written twice more by the initialiser (a
# GPU-built model's embedding, initialised twice by transformers on the H200): the pass
# first found is the initialisation itself; the weights its initialiser made are still
# the program's (7 of the 12 layers were found before, after four restarts).
# ... or written once more by another kernel (transformers zeroing an embedding's
# padding row after normal_): that region varies, and no launch forms a key at all, so
# no pass is ever found. After 256 such launches, what the initialising kernels made
# becomes the candidates (before: discovery never ended).
for spill in 1 0; do
    run init-other-$spill --init-kernel --init-other -- FT_SPILL=$spill
    expect_grep 'while initialising kernels made 4[0-9]\.[0-9] MiB' "$WORK/init-other-$spill.err" "init-other"
    expect_grep 'discovery: done, 1 iteration\(s\), 12 units, 48\.[0-9] MiB of weights' "$WORK/init-other-$spill.err" "init-other"
    expect_grep 'verdict: offloaded: 1[12] of 12 units stream' "$WORK/init-other-$spill.err" "init-other"
done
# ... and as the H200 showed it: two or more parameters in each of the caching
# allocator's segments, every parameter filled again by the program's own seeded init
# after the constructor's, the embedding written by another kernel. The initialiser
# touched each region it made two or more times; counted against it, those touches
# hid it, and discovery never ended (the conformance case gpu_built). Segments of 10
# MiB hold two layers: six units of 10 MiB, a budget of 24 MiB.
for spill in 1 0; do
    compare_run init-packed-$spill --init-kernel --segments 10 --init-refill --init-other -- FT_SPILL=$spill \
        FT_GPU_MEM_LIMIT=24MiB
    expect_grep 'while initialising kernels made 50\.0 MiB' "$WORK/init-packed-$spill.err" "init-packed"
    expect_grep 'discovery: done, 1 iteration\(s\), 6 units, 60\.0 MiB of weights' "$WORK/init-packed-$spill.err" "init-packed"
    expect_grep 'verdict: offloaded: 6 of 6 units stream' "$WORK/init-packed-$spill.err" "init-packed"
done
for spill in 1 0; do
    run init-twice-$spill --init-kernel --init-twice -- FT_SPILL=$spill
    expect_grep 'discovery: done, 1 iteration\(s\), 12 units, 48\.[0-9] MiB of weights' "$WORK/init-twice-$spill.err" "init-twice"
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/init-twice-$spill.err" "init-twice"
done
run init-threads --init-kernel --threads 2 -- FT_SPILL=1
# transformers' allocator warm-up (from_pretrained(device_map=...)): the free memory
# less 1.2 GiB, here 1200 MiB, with no floor. The budget's free made it negative (H200);
# before the plan the program sees the device's own answer.
run hf-warmup --hf-warmup 1200 -- FT_SPILL=1
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/hf-warmup.err" "hf-warmup"
# Two runs of layers that differ in the pass (two models decoded in turn on the H200:
# the second model's 14 layers were one unit of 1.8 GiB, and no plan fitted): each run
# of layers is cut into its own units.
run tail-layers --tail-layers 5 -- FT_SPILL=1
expect_grep 'discovery: done, 1 iteration\(s\), 12 units' "$WORK/tail-layers.err" "tail-layers"
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/tail-layers.err" "tail-layers"
# Activation-only kernels dominate every layer, their pointers the same layer after
# layer, with no host synchronisation in the forward (transformers' Mixtral decode on
# the H200: the small pool's activations made one decoder layer look like the pass).
# The detector verifies a period with two snapshots before it counts it.
run act-kernels --act-kernels 20 -- FT_SPILL=1
expect_grep 'discovery: done, 1 iteration\(s\), 12 units, 48\.[0-9] MiB of weights' "$WORK/act-kernels.err" "act-kernels"
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/act-kernels.err" "act-kernels"
# A compiler timing one kernel before the loop (torch.compile on the H200: a pass of one
# launch on one 2 MiB region, nothing planned): one weight-touching launch repeated is no
# pass (nothing in it could stream), so the detector passes over it; with the weights in
# one 64 MiB segment (XLA's arena), where the rule below cannot tell, that pass was taken
# for the loop before (one unit of 64 MiB, no plan at 48 MiB). Two kernels timed in turn
# (--autotune N,2): a pass whose units hold under a fifth of the unchanged memory beside
# them is set-up work; discovery starts over after it. The two on a matrix, input and
# output in one scratch allocation whose input is set anew for each pair (--autotune
# N,3; XLA's autotuner in its arena, jax_fraction on the H100): a short pass touching no
# weight is set-up work too (before, such passes spent discovery's four restarts in 25
# launches: no weights found, nothing planned).
for at in autotune:300:16 autotune-seg:300:48:--segments:64 autotune-pair:300,2:16 autotune-arena:300,3:16; do
    IFS=: read -r name n mib extra <<<"$at"
    compare_run "$name" --autotune "$n" ${extra//:/ } -- FT_SPILL=1 FT_GPU_MEM_LIMIT="${mib}MiB"
    expect_no_grep 'iteration\(s\) of 1 launches' "$WORK/$name.err" "$name"
    expect_grep 'discovery: done, 1 iteration\(s\), 12 units, (48\.[0-9]|64\.0) MiB of weights' "$WORK/$name.err" "$name"
    expect_grep 'verdict: offloaded: [1-9][0-9]* of 12 units stream' "$WORK/$name.err" "$name"
done
expect_grep 'set-up work \(a compiler timing a kernel\), not the program.s loop' "$WORK/autotune-pair.err" "autotune-pair"
expect_grep 'touch no weight: set-up work \(a compiler timing kernels on its own buffers\)' "$WORK/autotune-arena.err" \
    "autotune-arena"
# Weights from the driver's cuMemAlloc_v2 (XLA's allocator, programs on the driver
# API): served from virtual memory as cudaMalloc's are, so they stream (they stayed
# resident before: "none of its regions is backed by virtual memory").
for spill in 1 0; do
    run drv-alloc-$spill --drv-alloc -- FT_SPILL=$spill
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/drv-alloc-$spill.err" "drv-alloc"
    expect_no_grep 'stays resident \(none of its regions is backed by virtual memory\)' "$WORK/drv-alloc-$spill.err" "drv-alloc"
done
# A stale word in the argument padding of three kernels in a row, in every layer, a
# few bytes past the middle of one layer's weight (PyTorch's RoPE multiplies in a
# 16-layer Llama on the H200: discovery took a pass of 3 launches and planned nothing).
# Each layer is a unit.
run stale-rope --stale-rope -- FT_SPILL=1
expect_grep 'discovery: done, 1 iteration\(s\), 12 units, 48\.[0-9] MiB of weights' "$WORK/stale-rope.err" "stale-rope"
expect_grep 'verdict: offloaded: 1[12] of 12 units stream' "$WORK/stale-rope.err" "stale-rope"
# The weight the word points into stays resident: no load of its unit for the word, no
# unit kept on the device after 8 such loads.
expect_grep 'residency: 4\.0 MiB of weights used by several units, or reached only through pointer arrays, stay resident' \
    "$WORK/stale-rope.err" "stale-rope"
expect_no_grep 'miss on|stays on the device from now on' "$WORK/stale-rope.err" "stale-rope"
# A launcher that asks each pointer argument's attributes before it launches (Triton's,
# PyTorch Inductor's static one: torch.compile on the H200 stopped at "CUDA driver
# error: invalid argument" under FT_SPILL). A spilled allocation or a unit not loaded
# has nothing mapped, yet is device memory on this device to the program.
for spill in 1 0; do
    run ptr-query-$spill --ptr-query -- FT_SPILL=$spill
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/ptr-query-$spill.err" "ptr-query"
done
# Activations in the free room of the weights' segments (the H200's conformance cases:
# a 20 MiB caching-allocator segment holds two 8 MiB parameters, and prefill's
# activations took the 4 MiB after them): from forward 3 on, every layer reads and
# writes 4 KiB 2 MiB past the weights of its 12 MiB segment. Each unit was loaded for
# it, found changed at three unloads and kept on the device; now each segment's last 2
# MiB stays on the device and the unit streams the rest, the output the same (what the
# tail holds carries into the result). (From the first forward on, the segments' content
# would move in every pass, and discovery takes no weight from them: not handled.)
for spill in 1 0; do
    compare_run room-$spill --segments 12 --room-from 3 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=28MiB
    expect_grep 'residency: 6 region\(s\) split: other data past their weights, 12\.0 MiB in all' \
        "$WORK/room-$spill.err" "room"
    expect_grep 'verdict: offloaded: 6 of 6 units stream' "$WORK/room-$spill.err" "room"
    expect_no_grep 'changed between loads' "$WORK/room-$spill.err" "room"
done
# ... and kernels that reach a far layer's room at two pointers, input and output,
# while its unit is not loaded (the H200's pretrained_to and cpu_built: elementwise
# kernels in the room of units 2 and 3, after their splits, loaded them 8 times each
# "for argument words outside its part of the pass", and the budget made three other
# units stream). The lowest pointer into the region decides: past the split, nothing
# is loaded. Their four launches a layer, absent from the record, also drift the
# pass's launch count past every later unit's range: the unit after the one last
# placed still prefetches what follows it (before, 45 misses in 87 loads).
compare_run room-pair --segments 12 --room-from 3 --room-pair -- FT_SPILL=1 FT_GPU_MEM_LIMIT=28MiB
expect_grep 'residency: 6 region\(s\) split: other data past their weights, 12\.0 MiB in all' \
    "$WORK/room-pair.err" "room-pair"
expect_no_grep 'outside its part of the pass|changed between loads' "$WORK/room-pair.err" "room-pair"
misses=$(sed -nE 's/.* ([0-9]+) on demand \(misses\).*/\1/p' "$WORK/room-pair.err")
[ -n "$misses" ] && [ "$misses" -le 12 ] || fail "room-pair: ${misses:-no} misses, at most 12 wanted"
# The pass's launches drift from the recorded positions, where the checksum behind a
# unit's last launch was issued: the first touch of the unit after it issues it too, so
# that the prefetching thread hands slots over in stream order (the H200 made none
# before: no checksum was pending at any move; here 0 of 84 then).
expect_grep 'prefetching thread, off the application.s \(FT_PREFETCH_THREAD\); [1-9][0-9]* of them handed the leaving unit.s memory over' \
    "$WORK/room-pair.err" "room-pair: hand-overs with drifted passes"
# Every unit streams already, so nothing can leave the device for the 12 MiB of tails:
# the budget (28 MiB, 24 planned) is exceeded, said once and in the verdict, never
# silently (before, the verdict said the budget held while the device peaked at 34 MiB).
expect_grep 'warning: the memory budget \(28\.0 MiB: .*\) cannot hold the tail of a split region' \
    "$WORK/room-pair.err" "room-pair: the budget's excess said"
expect_grep 'verdict: offloaded: 6 of 6 units stream .*; budget exceeded by up to [0-9.]+ MiB after the plan by the tails of split regions FlexTensor keeps on the device \(a budget of [0-9.]+ MiB would have held them\)' \
    "$WORK/room-pair.err" "room-pair: the verdict"
# ... and in the first forward too (generate's prefill, then the decode steps; the next
# prompt's prefill after the plan): discovery starts over once, and each split begins
# past the weights the recorded pass reached (before, the first forward's touches held
# the bound back and four splits took a weight along: 22 MiB on the device, not 12).
compare_run room-first --segments 12 --room-from 14 --room-first -- FT_SPILL=1 FT_GPU_MEM_LIMIT=28MiB
expect_grep 'residency: 6 region\(s\) split: other data past their weights, 12\.0 MiB in all' \
    "$WORK/room-first.err" "room-first"
expect_grep 'verdict: offloaded: 6 of 6 units stream' "$WORK/room-first.err" "room-first"
# ... and other data found lower in the room after the split (a caching allocator
# hands out the room's lower blocks later: on the H100, tied's unit.2, split at 18 MiB,
# was written at 16 MiB, found changed three times and kept on the device over the
# plan; prefill took 13.6x in one run of two). The split moves down: the part it adds
# gets memory of its own, and no unit is found changed (12 of 12 before).
# Under offload timing and a trace: loads copy less once a region is split, and
# ft-trace reads the record (it refused a trace of the H100's gpu_built for it). The
# room's launches are not in the recorded pass: each layer's first weight touch puts
# the pass back on the record, so every unit's compute is timed (only unit.0's was,
# as on the H100, where every decode step left the record at its first such launch).
compare_run room-low --segment-kib 8196 --room-from 3 --room-low 8 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=40MiB \
    FT_OFFLOAD_TIMING=on FT_TRACE_FILE="$WORK/room-low.trace" FT_LOG_LEVEL=info
"$BUILD/bin/ft-trace" "$WORK/room-low.trace" > "$WORK/room-low.ftt" 2>&1 || {
    sed 's/^/    | /' "$WORK/room-low.ftt" >&2; fail "room-low: ft-trace refused the trace"; }
expect_grep 'discovery: [0-9]+ pass\(es\) followed since; [1-9][0-9]* time\(s\) a launch.s weight moved its pass to where the recorded pass read it' \
    "$WORK/room-low.err" "room-low"
timed=$(awk '/^flextensor:   unit\.[0-9]+ / && $10 + 0 > 0 { n++ } END { print n + 0 }' "$WORK/room-low.err")
[ "$timed" = 12 ] || fail "room-low: $timed of 12 units' compute timed"
expect_grep 'residency: 12 region\(s\) split: other data past their weights, 48\.0 MiB in all' \
    "$WORK/room-low.err" "room-low"
expect_grep 'holds other data at 6\.0 MiB too, below its split: the split moves down, the 4\.0 MiB from 6\.0 MiB on stay' \
    "$WORK/room-low.err" "room-low"
expect_no_grep 'changed between loads' "$WORK/room-low.err" "room-low"
expect_grep 'verdict: offloaded: 12 of 12 units stream' "$WORK/room-low.err" "room-low"
# A kernel chosen by shape (on the H100, the attention kernel cuDNN picked once the
# decode's KV cache had grown, at the same position as the recorded one): every pass
# left the record at each layer's first activation kernel and, its later launches being
# the recorded ones, never came back (only unit.0's compute was timed, no checksum was
# issued after a unit's last launch). The next weight's launch now makes the position
# sure again.
compare_run act-twin --act-kernels 8 --act-twin 12 --iters 30 -- FT_GPU_MEM_LIMIT=16MiB FT_OFFLOAD_TIMING=on \
    FT_LOG_LEVEL=info
expect_grep 'residency: passes left the record [1-9][0-9]* time\(s\)' "$WORK/act-twin.err" "act-twin"
timed=$(awk '/^flextensor:   unit\.[0-9]+ / && $10 + 0 > 0 { n++ } END { print n + 0 }' "$WORK/act-twin.err")
[ "$timed" = 12 ] || fail "act-twin: $timed of 12 units' compute timed"
# Prefill passes between decode passes (--prefill-every 4) launch fewer kernels between
# two weights than the recorded decode pass. A weight that puts such a pass forward past
# a unit's last recorded launch (the launches between left out) has the unit's checksum
# issued there. Before, with --prefill-gemv (the prefill's GEMM the decode's kernel, as
# some of a prefill's GEMMs are on the GPU) that unit left its slot with a host wait: on
# a copy-bound simulated link (MODEL_SIM_BYTES_PER_NS=300, 30 layers, 40 MiB), 70 such
# moves, prefill steps 14% slower; 0 and the decode's step time now. (gpu_built at 1/2
# on the H100: 74 such moves, prefill 1.59x the link bound.)
compare_run prefill-gemv --act-kernels 8 --prefill-every 4 --prefill-gemv -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep '[1-9][0-9]* time\(s\) a launch.s weight moved its pass' "$WORK/prefill-gemv.err" "prefill-gemv: passes put back"
expect_grep 'residency: [1-9][0-9]* time\(s\) a launch.s weight put its pass past a unit.s last launch' \
    "$WORK/prefill-gemv.err" "prefill-gemv: checksums where positions were skipped"
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/prefill-gemv.err" "prefill-gemv"
pass "prefill passes (fewer launches between weights) put forward by their weights: the units passed have their checksums there"
# The pass's first launch writing its output into the room past another layer's weight
# (--start-room: an embedding's output that a caching allocator placed in the room of a
# segment holding a layer's weights, as gpu_built's prefills on the H100, where "no
# pass has started" was said in every run): a touch past every weight's start in
# another unit's region is no weight's, and the launch still starts its pass (before:
# 7 passes followed after discovery, 27 now).
compare_run start-room --pad-odd --start-room 10 --iters 30 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=24MiB
expect_no_grep 'no pass has started' "$WORK/start-room.err" "start-room"
expect_grep 'discovery: 2[0-9] pass\(es\) followed since' "$WORK/start-room.err" "start-room: every pass followed"
pass "a pass's first launch writing into the room past another layer's weight still starts its pass"
# Weights in memory the program maps itself (cuMemCreate, cuMemMap, cuMemSetAccess):
# with FT_PROGRAM_MAPPINGS=serve (not yet the default: no GPU run has shown it),
# FlexTensor stands in for the handles (shim/progmap.c) and serves each whole mapping
# as an allocation of its own at the program's address, which it can find weights in
# and move. One mapping per tensor (PyTorch's expandable_segments):
compare_run own-vmm --own-vmm -- FT_PROGRAM_MAPPINGS=serve FT_GPU_MEM_LIMIT=24MiB
expect_grep "the program's own mappings: 38 served as FlexTensor's allocations" "$WORK/own-vmm.err" "own-vmm"
expect_grep 'verdict: offloaded: 12 of 12 units stream' "$WORK/own-vmm.err" "own-vmm"
# XLA's pool: chunks mapped end to end in one reserved range as the pool grows, the
# tensors carved across chunk boundaries, everything unmapped in one call at the end.
# The chunks are one allocation's pieces: a copy across a boundary with the next chunk
# moved out by FT_SPILL was an illegal address when each chunk was an allocation.
L_SAVED=("${L[@]}")
L=(--layers 12 --dim 2048 --iters 20 --quiet)
for spill in 1 0; do
    compare_run own-pool-$spill --own-vmm-pool 64 -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=$spill FT_GPU_MEM_LIMIT=140MiB
    expect_grep "the program's own mappings: 4 served" "$WORK/own-pool-$spill.err" "own-pool-$spill"
    expect_grep 'verdict: offloaded: [1-9][0-9]* of 12 units stream' "$WORK/own-pool-$spill.err" "own-pool-$spill"
done
# The pool unmapped at exit while the mover loads the next pass's first unit: the free
# waits for the move (the mover found a piece gone from the table and crashed, in 1
# run of 3 with these settings; 12 runs see it with odds of 99%).
L=(--layers 6 --dim 1024 --iters 15 --threads 2 --quiet --stale --stale-new 8 --cross-from 9)
for k in $(seq 1 12); do
    compare_run own-pool-exit-$k --own-vmm-pool 10 -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_DISCOVERY_ITERS=2 \
        FT_GPU_MEM_LIMIT=28048286 FT_PINNED_MEMORY_MODE=host_register FTSIM_TIME_SCALE=0.002
done
expect_grep 'verdict: offloaded' "$WORK/own-pool-exit-1.err" "own-pool-exit"
# Tensors across the pool's pieces, two layers a unit (kernels alternating between
# layers): layer 6 starts in a piece kept on the device (layer 5 runs into it) and runs
# into the next piece, its unit's, streamed. Passes one layer short from forward 7 on
# leave the record, so the guard alone loads that unit: a pointer past the start of a
# piece's last tensor reaches the next piece's unit (before, nothing was loaded and
# layer 6's kernel read the piece unmapped: an illegal address).
L=(--layers 10 --dim 768 --iters 14 --quiet)
compare_run own-pool-overrun --own-vmm-pool 2 --segments 2 --alt-odd --skip-last-from 7 -- \
    FT_PROGRAM_MAPPINGS=serve FT_GPU_MEM_LIMIT=25577155
expect_grep 'verdict: offloaded: 3 of 5 units stream' "$WORK/own-pool-overrun.err" "own-pool-overrun"
L=("${L_SAVED[@]}")
# The pool's room not yet used (206 MiB of one 256 MiB chunk) is not weights a set-up
# pass left aside: discovery ends on the forward, not over and over.
compare_run own-pool-room --own-vmm-pool 256 -- FT_PROGRAM_MAPPINGS=serve FT_GPU_MEM_LIMIT=300MiB
expect_grep 'discovery: done, 1 iteration\(s\), 12 units' "$WORK/own-pool-room.err" "own-pool-room"
expect_no_grep 'lies unused beside them' "$WORK/own-pool-room.err" "own-pool-room"
# A pool much larger than what the program has used by the plan (XLA's doubling chunks;
# a preallocated arena): the room past the last piece used (16 MiB apart) goes to
# host-located memory at the switch, so the budget need not hold it (before, the plan
# counted 206 MiB of non-weight memory and planned nothing). From forward 12 on each
# forward carves a fresh buffer from the pool, reaching into that room: same output.
# Without host-located memory (FTSIM_HOST_VMM=0) the room stays, said, and nothing is
# planned.
L=(--layers 24 --dim 1024 --iters 60 --quiet)
compare_run own-pool-host --own-vmm-pool 256 --pool-late 12 -- FT_PROGRAM_MAPPINGS=serve FT_GPU_MEM_LIMIT=72MiB
expect_grep "142\.0 MiB of the program's own pools that no call had used \(71 piece\(s\)\) moved to host memory" \
    "$WORK/own-pool-host.err" "own-pool-host"
expect_grep 'verdict: offloaded: 23 of 24 units stream' "$WORK/own-pool-host.err" "own-pool-host"
# ... the fresh buffers are carved from that room: an eager launch's pointers there are
# said; with the budget all planned, they stay in host-located memory (no unit is made
# to stream for an eager launch's room), and the next ones are not asked about again.
expect_grep "the arguments of _Z9model_mixPjPKji point into 4\.0 MiB of the program's pools in host-located memory .*0\.0 MiB brought to the device, the rest stays there \(the budget has no more room left" \
    "$WORK/own-pool-host.err" "own-pool-host: a fresh buffer in the room"
[ "$(grep -c 'point into .* of the program.s pools in host-located memory' "$WORK/own-pool-host.err")" = 1 ] ||
    fail "own-pool-host: the room an eager launch reaches is asked about once a plan"
compare_run own-pool-nohost --own-vmm-pool 256 --pool-late 12 -- FT_PROGRAM_MAPPINGS=serve FT_GPU_MEM_LIMIT=72MiB \
    FTSIM_HOST_VMM=0
expect_grep 'the device has no host-located virtual memory' "$WORK/own-pool-nohost.err" "own-pool-nohost"
expect_grep 'verdict: no plan: the budget 72\.0 MiB is below the smallest that works' "$WORK/own-pool-nohost.err" \
    "own-pool-nohost"
L=("${L_SAVED[@]}")
# Handles exported before they are mapped (NCCL's buffers) are made real, the program's:
# nothing FlexTensor can find or move. Every tensor there, activations too (as on the
# H200: no launch touches a region FlexTensor knows, and discovery would observe until
# its bound, at 1.4x the step time): past the budget, FlexTensor stands down within 256
# launches. Under a budget above that memory, it observes on, and says the same at the
# end.
run own-export --own-vmm-export -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1
expect_grep "the program's own mappings: 0 served as FlexTensor's allocations \(0\.0 MiB in all\), 38 handle\(s\) made real" \
    "$WORK/own-export.err" "own-export"
expect_grep 'verdict: stood down: the program maps its device memory itself \(cuMemMap, 100\.0 MiB: handles FlexTensor does not stand in for: exported, or another device.s\), more than the budget 16\.0 MiB' \
    "$WORK/own-export.err" "own-export"
# One handle larger than FlexTensor serves in pieces (8192 granules: 512 MiB at this
# granule, 16 GiB at the GPU's 2 MiB), as XLA's preallocated arena (75% of the device)
# is: it stays the program's, and the stand-down names the size and XLA's settings.
run own-arena --own-vmm-pool 600 -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FTSIM_VMM_GRANULARITY=64KiB
expect_grep 'verdict: stood down: the program maps its device memory itself \(cuMemMap, 600\.0 MiB: one handle of 600\.0 MiB, more than FlexTensor serves in pieces \(512\.0 MiB\); .*XLA_PYTHON_CLIENT_PREALLOCATE=false' \
    "$WORK/own-arena.err" "own-arena"
# FT_PROGRAM_MAPPINGS=leave (the default): the handles stay the program's, as exported
# ones do.
run own-leave --own-vmm -- FT_SPILL=1 FT_PROGRAM_MAPPINGS=leave
expect_grep 'verdict: stood down: the program maps its device memory itself \(cuMemMap, 100\.0 MiB: FT_PROGRAM_MAPPINGS=leave' \
    "$WORK/own-leave.err" "own-leave"
# Handles exported after they are mapped and the weights written in them (NCCL maps its
# buffers, then exports them for its peers' processes): each served mapping is handed
# back to the program, its bytes kept (the export was refused before, an error in the
# program), with FT_SPILL's pieces in host memory or not.
run own-export-late --own-vmm-export-late -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1
expect_grep "the program.s own mappings: 38 served as FlexTensor.s allocations \(100\.0 MiB in all\), 36 handle\(s\) made real \(.*36 of them handed back after being served, for an export\)" \
    "$WORK/own-export-late.err" "own-export-late"
compare_run own-export-late-0 --own-vmm-export-late -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=0 FT_GPU_MEM_LIMIT=200MiB
expect_grep "36 of them handed back after being served, for an export" "$WORK/own-export-late-0.err" "own-export-late-0"
compare_run own-export-room --own-vmm-export -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_GPU_MEM_LIMIT=200MiB
expect_grep 'verdict: no plan: .*; the program mapped up to 100\.0 MiB of device memory itself' "$WORK/own-export-room.err" \
    "own-export with room"
run grow-bound --grow-cache -- FT_SPILL=1 FT_OBSERVE_MAX_LAUNCHES=100
expect_grep 'verdict: stood down: discovery did not find the program.s passes in 100 launches' "$WORK/grow-bound.err" "bounded"
for name in init-kernel-1 init-kernel-0 load-after-launch-1 load-after-launch-0 init-threads; do
    expect_grep 'discovery: done, 1 iteration\(s\), 12 units, 48\.[0-9] MiB of weights' "$WORK/$name.err" "$name"
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/$name.err" "$name"
done
expect_grep 'kernels that do not run in the passes made them: 4[0-9]\.[0-9] MiB' "$WORK/init-kernel-1.err" "init-kernel"
# ... within 6 forwards of 36 launches: the passes first found (on the input, the one
# region alive at the first launch) start discovery over at once. When a short period
# had to prove itself over 4 matches, that took 16 forwards here, and on the H200 a
# model built on the device (conformance gpu_built) found no pass in 33139 launches.
expect_grep 'discovery: 1 iteration\(s\) of 36 launches, 12 units, 48\.[0-9] MiB of weights, after (1[0-9][0-9]|2[01][0-9]) launches' \
    "$WORK/init-kernel-1.err" "init-kernel: discovery's length"
expect_grep 'launches in a row touched no region alive at its start, while 4[0-9]\.[0-9] MiB were copied' \
    "$WORK/load-after-launch-1.err" "load-after-launch"
# One allocation holding every weight, as transformers' from_pretrained with device_map
# makes (its allocator warm-up sizes one segment for all of them; on the H200: one unit,
# no plan). Over half the budget, it is served in pieces of one granule: the pieces a
# tensor's body fills join its unit, a piece where one layer's tensors end and the
# next's begin stays on the device (7 of them, 14 MiB), a pointer to the tensor that
# starts in such a piece loads the unit of its body, a copy running across two layers
# (--refill) loads every piece it reaches (before: an illegal address there), and a
# pointer's range (cuPointerGetAttribute, cuMemGetAddressRange: --ptr-query) is the
# segment's, not a piece's.
for spill in 1 0; do
    compare_run one-seg-$spill --layers 8 --dim 2048 --segments 136 --refill 10 --ptr-query -- FT_SPILL=$spill \
        FT_GPU_MEM_LIMIT=64MiB FTSIM_REPORT_PEAK=1
    expect_grep 'discovery: done, 1 iteration\(s\), 8 units, 136\.0 MiB of weights' "$WORK/one-seg-$spill.err" "one-seg"
    expect_grep 'residency: 14\.0 MiB of weights used by several units, or reached only through pointer arrays, stay resident' \
        "$WORK/one-seg-$spill.err" "one-seg: the pieces two layers share"
    expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-$spill.err" "one-seg"
    expect_grep 'a copy or set: miss on unit\.[0-9]' "$WORK/one-seg-$spill.err" "one-seg: the copy across layers"
    expect_no_grep 'illegal address' "$WORK/one-seg-$spill.err" "one-seg"
    # Larger than the budget, under FT_SPILL the part of the allocation the budget cannot
    # hold is in host-located memory until the plan (its last 72 MiB), which the device
    # reads over the link: the whole run's device peak is within the budget, nothing
    # else moves for it, and at the switch what stays of it comes to the device (before:
    # it stayed on the device whole, 72 MiB past the budget; moving it out whole, its
    # next touch brought it back: 68 pieces in and out here, on the H100 470846 moves).
    if [ "$spill" = 1 ]; then
        expect_grep 'an allocation of 136\.0 MiB, past the budget before the plan: 72\.0 MiB of it in host memory' \
            "$WORK/one-seg-1.err" "one-seg: the allocation larger than the budget"
        expect_grep 'residency: 8\.0 MiB in host memory since before the plan \(4 piece\(s\)\) brought to the device' \
            "$WORK/one-seg-1.err" "one-seg: what stays comes to the device"
        expect_no_grep 'FT_SPILL: before the plan, [0-9]+ allocation\(s\) moved in' "$WORK/one-seg-1.err" \
            "one-seg: nothing moves before the plan"
        expect_no_grep 'budget exceeded' "$WORK/one-seg-1.err" "one-seg: the budget holds"
        peak=$(sed -nE 's/^simcuda: device 0: peak physical memory ([0-9]+) bytes.*/\1/p' "$WORK/one-seg-1.err")
        [ -n "$peak" ] && [ "$peak" -le $((64 << 20)) ] || fail "one-seg-1: device peak ${peak:-unknown} bytes, over the 64 MiB budget"
    fi
    misses=$(sed -nE 's/.* ([0-9]+) on demand \(misses\).*/\1/p' "$WORK/one-seg-$spill.err")
    [ -n "$misses" ] && [ "$misses" -le 6 ] || fail "one-seg-$spill: ${misses:-no} misses, at most 6 wanted"
done
# Without host-located memory (FTSIM_HOST_VMM=0) the allocation stays on the device
# whole until the plan, said, and nothing else moves for it.
compare_run one-seg-nohost --layers 8 --dim 2048 --segments 136 --refill 10 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=64MiB \
    FTSIM_HOST_VMM=0
expect_grep 'FT_SPILL: an allocation of 136\.0 MiB, larger than the budget \(64\.0 MiB\), stays on the device until the plan' \
    "$WORK/one-seg-nohost.err" "one-seg-nohost"
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-nohost.err" "one-seg-nohost"
# Without FlexTensor's own copies (on the H100, a JAX process: FlexTensor's runtime calls
# failed, its 3.1 GiB in host-located memory could not come back, and XLA's GEMMs read
# them over the link until the run timed out), nothing goes to host-located memory:
# here the first pinned allocation, the bounce buffer that test makes, fails.
compare_run one-seg-noown --layers 8 --dim 2048 --segments 136 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=64MiB \
    FTSIM_FAIL_HOST_ALLOC=1
expect_grep "FlexTensor's own copies are not available in this process" "$WORK/one-seg-noown.err" "one-seg-noown"
expect_no_grep 'past the budget before the plan: .* in host memory' "$WORK/one-seg-noown.err" "one-seg-noown"
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-noown.err" "one-seg-noown"
# A unit's pieces lie end to end: one cuMemUnmap a run of them, as access is set, not
# one a piece. A driver that refuses a range of several mappings (FTSIM_VMM_UNMAP_ONE)
# gets one call a mapping from its refusal on.
# Units hold 7 or 8 pieces (a piece where two layers meet stays on the device): the
# prefetching thread hands a leaving unit's memory to the next whatever their counts,
# mapping what the larger lacks or releasing what the smaller leaves (26 of 55 moves
# evicted with a host wait before: "regions of other sizes"); none of it is left
# behind (in use at the simulated device's exit: 60 MiB when the tail kept it).
for spill in 1 0; do
    expect_grep 'off the application.s \(FT_PREFETCH_THREAD\); [0-9]+ of them handed' "$WORK/one-seg-$spill.err" "one-seg"
    set -- $(sed -nE 's/.* ([0-9]+) of the prefetches made on .*; ([0-9]+) of them handed.*/\1 \2/p' "$WORK/one-seg-$spill.err")
    [ $# = 2 ] && [ $(($2 * 10)) -ge $(($1 * 8)) ] || fail "one-seg-$spill: ${2:-no} hand-overs of ${1:-no} moves, 80% wanted"
    left=$(sed -nE 's/^simcuda: device 0: peak physical memory .*; ([0-9]+) bytes in use at exit/\1/p' "$WORK/one-seg-$spill.err")
    [ -n "$left" ] && [ "$left" -lt 1048576 ] || fail "one-seg-$spill: ${left:-no count of} bytes of device memory in use at exit"
done
calls=$(sed -nE 's/.*in cuMemUnmap \(([0-9]+) call\(s\) for ([0-9]+) region.*/\1 \2/p' "$WORK/one-seg-0.err")
set -- $calls
[ $# = 2 ] && [ "$1" -gt 0 ] && [ $(($1 * 4)) -le "$2" ] || fail "one-seg: ${1:-no} cuMemUnmap call(s) for ${2:-no} regions, a run of pieces a call wanted"
# A load maps a run of a unit's pieces from few physical allocations, each mapped whole
# (the H100's driver maps no part of one, and the simulator refuses it as it does): the
# driver's mapping calls cost per mapping (53 mappings of a unit took 3 ms a move on
# the H100). A hand-over's incoming unit takes the leaving unit's allocations that fit
# it whole, and new memory for the rest: one call a piece before (937 for 937 regions
# here), about 2 a load now.
calls=$(sed -nE 's/.*in cuMemMap \(([0-9]+) call\(s\)\).*for ([0-9]+) region\(s\)\).*/\1 \2/p' "$WORK/one-seg-0.err")
set -- $calls
[ $# = 2 ] && [ "$1" -gt 0 ] && [ $(($1 * 3)) -le "$2" ] || fail "one-seg: ${1:-no} cuMemMap call(s) for ${2:-no} regions loaded, a run of pieces a call wanted"
compare_run one-seg-unmap-one --layers 8 --dim 2048 --segments 136 -- FTSIM_VMM_UNMAP_ONE=1 FT_GPU_MEM_LIMIT=64MiB
expect_grep 'residency: cuMemUnmap refused a range of [0-9]+ adjacent regions \(1\): one call per mapping from now on' \
    "$WORK/one-seg-unmap-one.err" "one-seg, one mapping a cuMemUnmap"
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-unmap-one.err" "one-seg, one mapping a cuMemUnmap"
# ... and a segment filled from its end down (--seg-down): each tensor's copy ends in the
# piece where the next-placed layer's tensors start. Every piece was kept on the device
# (a copy seemed to span two units' pieces); a piece the copy ends in before any pointer
# into it only holds the copied tensor's tail (kept on the device as a boundary piece).
compare_run one-seg-down --layers 8 --dim 2048 --segments 136 --seg-down -- FT_SPILL=0 FT_GPU_MEM_LIMIT=64MiB
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-down.err" "one-seg, filled from its end down"
# The free room below the weights starts the segment: the piece where the lowest weight
# starts (past its first byte) may be run into by a temporary carved from that room
# later, so it stays on the device with the boundary pieces (2 MiB more).
expect_grep 'residency: 16\.0 MiB of weights used by several units' "$WORK/one-seg-down.err" "one-seg-down: the boundary pieces"
# ... and from forward 6 on (after the plan), a block of that room across the start of
# the lowest weight's piece, mixed into by every layer: with that piece streamed, the
# kernel ran into it unmapped (simcuda: illegal address in model_mix).
compare_run one-seg-down-room --layers 8 --dim 2048 --segments 136 --seg-down --room-from 6 -- FT_SPILL=0 \
    FT_GPU_MEM_LIMIT=64MiB
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-down-room.err" "one-seg-down, a temporary in the room below"
# ... and two threads running the model on streams of their own; and a captured
# forward replayed as a CUDA graph, whose guard loads the units of the tensors' bodies
# too (before: an illegal address in the replay).
compare_run one-seg-threads --layers 8 --dim 2048 --segments 136 --threads 2 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=64MiB
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/one-seg-threads.err" "one-seg, two threads"
compare_run one-seg-graph --layers 8 --dim 2048 --segments 136 --iters 6 --graph 3 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=64MiB
expect_grep 'CUDA graphs: 3 launch\(es\) guarded' "$WORK/one-seg-graph.err" "one-seg, a graph"
pass "one allocation holding every weight (from_pretrained with device_map), over half the budget: served in pieces, what the budget cannot hold of it in host-located memory until the plan (the device peak within the budget), 8 of 8 units stream, a copy across two layers loads what it reaches, pointer ranges are the allocation's, a run of pieces mapped from one physical allocation and unmapped in one call (one a mapping where the driver refuses runs); same output (FT_SPILL on and off, two threads, a CUDA graph)"
pass "weights made by kernels, copied in after warm-up kernels, decode with a growing KV cache, small weights packed in one segment (kept on the device while the rest streams), transformers' allocator warm-up, two kinds of layers in one pass, activation-only kernels in every layer, a kernel timed 300 times before the loop (in a 64 MiB segment too; two kernels in turn, on the weight or in a scratch arena), weights from the driver's cuMemAlloc, a stale misaligned address in every layer, pointer attributes asked before launches, activations in the room after a segment's weights (reached at two pointers from a far layer too), weights in the program's own mappings (served and streamed, the pool unmapped while the mover loads, a tensor from a piece kept on the device into a streamed one, the pool's unused room moved to host memory and carved into later; exported ones left, and FlexTensor stands down; exported once mapped and written: handed back, bytes kept), at 1/3 of the weights: same output, no crash, one verdict (FT_SPILL on and off, two threads, bounded discovery); the first two found and streamed"
# No CUDA runtime FlexTensor can call: the model with the runtime linked in statically
# (model-sim-static), as JAX's XLA links it. The program's calls reach FlexTensor at the
# driver only, and FlexTensor's own (its streams, events, pinned buffers, copies,
# checksums) go to the driver too (before: a segmentation fault at the first
# allocation, calling a runtime function that was not there; on the H100, a JAX process
# could not make a stream or an event, and planned nothing). At 1/3 of the weights,
# with FT_SPILL on and off, the pool XLA maps itself served (its room in host-located
# memory, which needs FlexTensor's own copies), and the allocation larger than the
# budget: same output, the plan streams.
MODEL_SAVED=$MODEL
MODEL=$BUILD/examples/model-sim-static
for spill in 1 0; do
    run static-$spill -- FT_SPILL=$spill
    expect_grep 'no CUDA runtime in this process that FlexTensor can call' "$WORK/static-$spill.err" "static-runtime"
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/static-$spill.err" "static-runtime"
    expect_no_grep 'cannot find the real|did not load|cannot set up CUDA events' "$WORK/static-$spill.err" "static-runtime"
done
L=(--layers 24 --dim 1024 --iters 60 --quiet)
compare_run static-pool --own-vmm-pool 256 --pool-late 12 -- FT_PROGRAM_MAPPINGS=serve FT_GPU_MEM_LIMIT=72MiB
expect_grep "142\.0 MiB of the program's own pools that no call had used \(71 piece\(s\)\) moved to host memory" \
    "$WORK/static-pool.err" "static-runtime, XLA's pool"
expect_grep 'verdict: offloaded: 23 of 24 units stream' "$WORK/static-pool.err" "static-runtime, XLA's pool"
L=("${L_SAVED[@]}")
compare_run static-seg --layers 8 --dim 2048 --segments 136 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=64MiB FTSIM_REPORT_PEAK=1
expect_grep 'an allocation of 136\.0 MiB, past the budget before the plan: 72\.0 MiB of it in host memory' \
    "$WORK/static-seg.err" "static-runtime, one segment"
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/static-seg.err" "static-runtime, one segment"
# ... and XLA's command buffer: built node by node before the plan, the layers traced
# into it, over the served pool. At the graph's making FT_SPILL stops; the pool's pieces
# in host-located memory stay there (mapped, the device reads them; before, they all
# came back, over the budget). After the plan the graph is cut at its units: its
# tensors start in pieces kept on the device and run on into streamed ones, and the cut
# counts those (before: it found no streamed unit, and each replay loaded all 20 over
# the 2 slots), prefetched one segment ahead.
L=(--layers 24 --dim 1024 --iters 4 --quiet)
compare_run static-graph --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-into -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 \
    FT_GPU_MEM_LIMIT=80MiB FTSIM_REPORT_PEAK=1
expect_grep 'a CUDA graph is built node by node .*: 176\.0 MiB in host-located memory stay there until the plan' \
    "$WORK/static-graph.err" "static-runtime, a graph built node by node"
expect_grep 'CUDA graphs: graph 0x[0-9a-f]+ reads 20 streamed unit\(s\), more than the 2 slot\(s\) hold: cut into 20 segment' \
    "$WORK/static-graph.err" "static-runtime, a graph built node by node"
expect_grep 'verdict: offloaded: 20 of 24 units stream' "$WORK/static-graph.err" "static-runtime, a graph built node by node"
misses=$(sed -nE 's/.* ([0-9]+) on demand \(misses\).*/\1/p' "$WORK/static-graph.err")
[ -n "$misses" ] && [ "$misses" -le 2 ] || fail "static-graph: ${misses:-no} misses, at most 2 wanted"
# At FT_LOG_LEVEL=trace, before each segment, the driver is asked what each pointer
# of its calls reaches within its allocation: an unmapped granule there may only be a
# streamed unit's that is not loaded (in a pool, a pointer's walk runs on into later
# layers' pieces), never one of a loaded unit or of memory no unit holds.
compare_run static-graph-trace --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-into -- FT_PROGRAM_MAPPINGS=serve \
    FT_SPILL=1 FT_GPU_MEM_LIMIT=80MiB FT_LOG_LEVEL=trace
n=$(grep -c 'CUDA graphs: graph 0x[0-9a-f]* segment [0-9]*: [0-9]* granule(s) its [0-9]* region(s). pointers reach asked' \
    "$WORK/static-graph-trace.err" || true)
[ "$n" -ge 20 ] || fail "static-graph-trace: $n segments' pointers asked of the driver, 20 or more wanted"
expect_grep 'not mapped \(CUresult [0-9]+, mapped 0\): region [0-9]+ .*, unit [0-9]+ \(not loaded\)' \
    "$WORK/static-graph-trace.err" "static-graph-trace: later layers' pieces, not loaded"
expect_no_grep 'not mapped \(CUresult .*(unit -1|\(loaded\))' "$WORK/static-graph-trace.err" \
    "static-graph-trace: an unmapped granule of a loaded unit, or of no unit"
# ... its nodes updated on the executable graph, as XLA updates a command buffer's
# between steps: the segments follow.
compare_run static-graph-update --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-update -- \
    FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_GPU_MEM_LIMIT=80MiB
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 37 launch\(es\) of them streamed' \
    "$WORK/static-graph-update.err" "static-runtime, a graph updated node by node"
expect_grep 'verdict: offloaded: 2[01] of 24 units stream' "$WORK/static-graph-update.err" \
    "static-runtime, a graph updated node by node"
# ... and with FT_GRAPH_CUT=false (a graph is not cloned, so profiling cannot launch it
# in parts): each replay is timed whole, so profiling ends and the plan is made (before:
# the replays were left out of every profiled pass and profiling never ended; XLA on
# the H100, killed at its time limit with FT_SPILL's memory read over the link).
compare_run static-graph-nocut --own-vmm-pool 256 --graph-nodes 40 -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 \
    FT_GPU_MEM_LIMIT=80MiB FT_GRAPH_CUT=false
expect_grep 'cannot be launched in parts between its units \(it was not cloned\): it is timed whole' \
    "$WORK/static-graph-nocut.err" "static-runtime, graphs not cut"
expect_grep 'verdict: offloaded: 2[01] of 24 units stream' "$WORK/static-graph-nocut.err" \
    "static-runtime, graphs not cut"
expect_no_grep 'moves taken out of the units' "$WORK/static-graph-nocut.err" "static-runtime, graphs not cut"
# ... and a pool that holds the weights only, then room no buffer has used (XLA's last
# chunk on the H100: the last weight's unit took the room after it, 4092 MiB of "weights"
# for 3 GB, and the smallest budget that works was 1.42 GiB against 0.96): the room stays
# out of the units, and every unit streams under 72 MiB (before: 256 MiB of weights, no
# plan below 216 MiB).
L=(--layers 24 --dim 1024 --iters 60 --quiet)
compare_run static-pool-end --own-vmm-pool 256 --pool-weights-only -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 \
    FT_GPU_MEM_LIMIT=72MiB FTSIM_REPORT_PEAK=1
expect_grep 'discovery: done, 1 iteration\(s\), 24 units, 98\.0 MiB of weights' "$WORK/static-pool-end.err" \
    "static-runtime, the pool's room after the weights"
expect_grep 'verdict: offloaded: 24 of 24 units stream' "$WORK/static-pool-end.err" \
    "static-runtime, the pool's room after the weights"
peak=$(sed -nE 's/^simcuda: device 0: peak physical memory ([0-9]+) bytes.*/\1/p' "$WORK/static-pool-end.err")
[ -n "$peak" ] && [ "$peak" -le $((72 << 20)) ] || fail "static-pool-end: device peak ${peak:-unknown} bytes, over the 72 MiB budget"
# ... where no copy says where the last weight ends (JAX's weights, made on the device by
# jitted initialisers: the H100's unit of 1.1 GiB): the room is the pieces all zeros.
compare_run static-pool-end-kernel --own-vmm-pool 256 --pool-weights-only -- FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 \
    FT_GPU_MEM_LIMIT=72MiB FT_TEST_NO_COPY_SPAN=1
expect_grep 'discovery: done, 1 iteration\(s\), 24 units, 98\.0 MiB of weights' "$WORK/static-pool-end-kernel.err" \
    "static-runtime, the pool's room after weights no copy filled"
expect_grep 'verdict: offloaded: 24 of 24 units stream' "$WORK/static-pool-end-kernel.err" \
    "static-runtime, the pool's room after weights no copy filled"
# ... a second graph, built node by node after the plan over activations carved anew
# from the pool (XLA's prefill executable after the decode's replays): cut at its units
# too, the same output.
L=(--layers 24 --dim 1024 --iters 4 --quiet)
compare_run static-graph2 --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-second 3 -- FT_PROGRAM_MAPPINGS=serve \
    FT_SPILL=1 FT_GPU_MEM_LIMIT=80MiB
expect_grep 'CUDA graphs: 2 graph\(s\) cut into segments' "$WORK/static-graph2.err" \
    "static-runtime, a second graph built after the plan"
# ... its activations carved far into the pool's room (XLA's prefill temporaries, past
# what the decode used, which the switch left in host-located memory): at the graph's
# cut they come to the device, resident units made to stream for them within the
# budget; where even every unit streaming cannot hold them all, what it holds comes and
# the rest stays, read over the link. The same output either way, and the device peak
# within the budget (plus the 2 MiB that FT_SPILL's stop brought back over it before
# the plan, as the log says).
for far in 80 100; do
    compare_run static-graph2-far-$far --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-second 3 --second-far 40 -- \
        FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_GPU_MEM_LIMIT=${far}MiB FTSIM_REPORT_PEAK=1
    expect_grep '2\.0 MiB brought back to the device, over the budget' "$WORK/static-graph2-far-$far.err" \
        "static-runtime, a second graph's activations in the pool's room"
    peak=$(sed -nE 's/^simcuda: device 0: peak physical memory ([0-9]+) bytes.*/\1/p' "$WORK/static-graph2-far-$far.err")
    [ -n "$peak" ] && [ "$peak" -le $(((far + 2) * 1048576 + 65536)) ] ||
        fail "static-runtime, a second graph's activations in the pool's room: device peak ${peak:-?} bytes past ${far} MiB + 2 MiB"
done
expect_grep "calls point into [0-9.]+ MiB of the program's pools in host-located memory .*; [1-9][0-9.]* MiB brought to the device, the rest stays there \\(the budget cannot hold it" \
    "$WORK/static-graph2-far-80.err" "static-runtime, a second graph's activations in the pool's room, 80 MiB"
expect_grep "calls point into the program's pools in host-located memory \\(room no call had used before the plan\\): 22\\.0 MiB \\([0-9]+ piece\\(s\\)\\) brought to the device" \
    "$WORK/static-graph2-far-100.err" "static-runtime, a second graph's activations in the pool's room, 100 MiB"
expect_grep "bringing 22\\.0 MiB of room that graph 0x[0-9a-f]+'s calls point into to the device would exceed the budget .* streams from now on" \
    "$WORK/static-graph2-far-100.err" "static-runtime, a second graph's activations in the pool's room, 100 MiB"
# ... and its GEMM kernel one the driver gives no parameter layout for (the H100's
# driver answered so for XLA's kernels, CUDA_ERROR_INVALID_VALUE at index 0, as for a
# kernel without parameters): its node is taken to reach anything, and the graph's
# streamed units are loaded before each launch, never none.
compare_run static-graph2-nolayout --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-second 3 -- \
    FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_GPU_MEM_LIMIT=80MiB FTSIM_NO_PARAM_INFO=gemv_wide
expect_grep 'the driver gives no parameter layout for kernel _Z15model_gemv_wide' "$WORK/static-graph2-nolayout.err" \
    "static-runtime, a kernel with no parameter layout in a graph"
expect_grep 'is not cut into segments \(a captured call.s regions were not all kept\)' \
    "$WORK/static-graph2-nolayout.err" "static-runtime, a kernel with no parameter layout in a graph"
# ... its GEMM nodes naming a function handed out partly loaded (lazy loading: the
# driver gives its layout once it is loaded): loaded and read, the graph cut at its units.
compare_run static-graph2-lazy --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-second 3 --func-wide -- \
    FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_GPU_MEM_LIMIT=80MiB FTSIM_LAZY_FUNCS=1
expect_grep 'CUDA graphs: 2 graph\(s\) cut into segments' "$WORK/static-graph2-lazy.err" \
    "static-runtime, a second graph naming a function partly loaded"
expect_no_grep 'no parameter layout' "$WORK/static-graph2-lazy.err" \
    "static-runtime, a second graph naming a function partly loaded"
# ... its first activation carved from the pool past the weights where a piece of zeros
# lies before a piece a copy wrote before the first launch (XLA's pool on the H100: a
# prefill temporary from a piece of zeros into one its initialisers had written), and
# its first node writing on past the activation's words into that piece: a tensor does
# not run past a piece left out of its unit, so that piece never joins the last
# weight's unit (before: it did, streamed, and the node wrote it unmapped, an illegal
# address on the H100 and here). With copies' spans and without (JAX's weights).
for span in 1 0; do
    compare_run static-graph2-reuse-$span --own-vmm-pool 256 --graph-nodes 40 --graph-nodes-second 3 --second-reuse -- \
        FT_PROGRAM_MAPPINGS=serve FT_SPILL=1 FT_GPU_MEM_LIMIT=80MiB $([ $span = 0 ] && echo FT_TEST_NO_COPY_SPAN=1)
    expect_grep 'discovery: done, 1 iteration\(s\), 24 units, 98\.0 MiB of weights' \
        "$WORK/static-graph2-reuse-$span.err" "static-runtime, a second graph's activation over a piece past the room"
done
L=("${L_SAVED[@]}")
MODEL=$MODEL_SAVED
pass "no CUDA runtime in the process (linked statically, as XLA links it): FlexTensor's own calls through the driver; 11 of 12 units stream, the program's own pool served and its room in host memory, an allocation past the budget in host memory until the plan, a graph built node by node over the pool cut at its units (or, not cut, its replays profiled whole), the pool's room after the last weight left out of its unit, a second graph built after the plan cut too (its activations carved from the pool's room brought to the device within the budget, or left there and said), one with a kernel whose parameter layout the driver does not give loaded whole, one naming a function partly loaded cut, one whose activation runs from the room into a piece written before the first launch (never a unit's); at trace level, what each segment's pointers reach asked of the driver (unmapped only where a streamed unit is not loaded); same output"

# A kernel the driver gives no parameter layout for (CUDA_ERROR_INVALID_VALUE at index 0,
# as for one without parameters: the H100's driver for XLA's kernels that take pointers),
# launched in the prefill passes on the weights the decode passes' kernel reads. It was
# taken to have no parameters, to reach nothing: the guard loaded nothing for it, and
# it read a streamed unit that was not loaded (the simulator's illegal address, with
# FT_SPILL on and off). Now its launches are taken to reach anything: every streamed
# unit is loaded for them (before the plan, FT_SPILL brings everything in): slow where
# it happens, never a fault.
L=(--layers 12 --dim 1024 --iters 40 --quiet)
for spill in 0 1; do
    compare_run nolayout-$spill --act-kernels 8 --prefill-every 4 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=16MiB \
        FTSIM_NO_PARAM_INFO=gemv_wide
    expect_grep 'the driver gives no parameter layout for kernel _Z15model_gemv_wide' "$WORK/nolayout-$spill.err" \
        "a kernel with no parameter layout"
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/nolayout-$spill.err" "a kernel with no parameter layout"
done
# ... launched through its CUfunction (cuKernelGetFunction, cuLaunchKernel), as XLA
# launches: the same with no layout; and a function handed out partly loaded (lazy
# loading: the driver gives its layout once it is loaded) is loaded and asked again, so
# its launches are guarded by what they reach (before, taken to reach nothing: the
# simulator's illegal address).
compare_run nolayout-func --act-kernels 8 --prefill-every 4 --func-wide -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB \
    FTSIM_NO_PARAM_INFO=gemv_wide
expect_grep 'the driver gives no parameter layout for kernel _Z15model_gemv_wide' "$WORK/nolayout-func.err" \
    "a CUfunction with no parameter layout"
compare_run lazy-func --act-kernels 8 --prefill-every 4 --func-wide -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB \
    FTSIM_LAZY_FUNCS=1
expect_no_grep 'no parameter layout|may reach regions that were not recorded' "$WORK/lazy-func.err" \
    "a CUfunction partly loaded"
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/lazy-func.err" "a CUfunction partly loaded"
pass "a kernel with no parameter layout from the driver: taken to reach any weight (loaded for it), same output with FT_SPILL on and off, launched through a CUfunction too; a function partly loaded is loaded and its layout read"
