# Launches whose arguments reach more regions than a scan set once kept (64): a cat
# kernel (model.c --gather-from, as PyTorch's CatArrayBatchedCopy passes its inputs by
# value) holding every layer's bias, scale vector and weight, 99 pointers for 33
# layers, every weight past the 64th. Each user of the set must see them all
# (core/scan.h): the guard loads every streamed unit the launch reads, FT_SPILL faults
# in every allocation it holds in host memory, discovery sees the weights read outside
# their layers. When the set kept 64 and counted the rest, each case below read
# unmapped memory: an illegal address on the simulated device.
. "$(dirname "$0")/lib.sh"
L=(--layers 33 --dim 512 --iters 13 --quiet)

# run NAME LIMIT SPILL FROM [ENV...]: the model with the cat from forward FROM, under a
# LIMIT budget, compared with a run without the shim; its stderr in $WORK/NAME.err.
run() {
    local name=$1 limit=$2 spill=$3 from=$4
    shift 4
    sim "$MODEL" "${L[@]}" --gather-from "$from" >"$WORK/$name.plain" || fail "$name: model without shim failed"
    env FT_SPILL="$spill" FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT="$limit" "$@" \
        LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${L[@]}" --gather-from "$from" \
        >"$WORK/$name.shim" 2>"$WORK/$name.err" \
        || { grep -v '^flextensor: residency: .*: miss on' "$WORK/$name.err" | sed 's/^/    | /' >&2; fail "$name: model under the shim failed"; }
    cmp -s "$WORK/$name.plain" "$WORK/$name.shim" || fail "$name: output differs from the run without the shim"
}

# The guard: the cat first runs after the plan (a kernel discovery never saw), on a
# 16 MiB budget for 33 MiB of weights (66 MiB in 2 MiB granules): 28 of 33 units stream
# through 2 slots, and the units the cat reads that are not loaded are loaded on
# demand, over the slots, before it runs. Each of the 6 cats (forwards 7-12) finds the
# 2 units the pass left loaded and loads the other 26: the units beyond the slots
# leave at the next forward's first prefetch, so each cat misses on them again (when
# they stayed loaded, the later cats found them loaded: 27 misses in the whole run).
for strict in 1 0; do
    run guard-$strict 16MiB 0 7 FT_STRICT_GUARD=$strict
    expect_grep 'plan \(memory mode, knapsack\): 28 of 33 units streamed' "$WORK/guard-$strict.err" "guard: units streamed"
    expect_grep 'residency: _Z12model_gatherPj12model_gather: miss on unit\.' "$WORK/guard-$strict.err" \
        "guard (FT_STRICT_GUARD=$strict): the cat's units loaded on demand"
    expect_grep 'residency: [0-9]+ load\(s\), [0-9]+ of them prefetched and (15[6-9]|1[6-9][0-9]|[2-9][0-9][0-9]) on demand' \
        "$WORK/guard-$strict.err" "guard (FT_STRICT_GUARD=$strict): a miss for each unit not loaded, at each cat"
    expect_grep 'residency: 6 call\(s\) read more streamed units than the 2 slot\(s\) hold \(at most 26 beyond\)' \
        "$WORK/guard-$strict.err" "guard (FT_STRICT_GUARD=$strict): each cat over the slots, counted"
done
pass "a cat reaching 99 regions (every weight past the 64th) after the plan, 28 of 33 units streamed: each unit it reads is loaded before it runs, with and without FT_STRICT_GUARD; same output"

# Back within the slots: the cat in forward 7 only. It loads the 28 streamed units
# (2 MiB each in granules) over the 2 slots and the budget, and says so once; after
# it, the next prefetch unloads the units beyond the slots, so that forwards 8-12 run
# within the slots and the budget again. Every forward's checksum is compared (no
# --quiet): the cat's, and those after the units beyond the slots left. When the
# units stayed loaded, ft_get_gpu_memory_usage counted 56 MiB of streamed units held
# after the last forward, and cudaMemGetInfo nothing free, against the 16 MiB budget.
G=(--layers 33 --dim 512 --iters 13 --gather-from 7 --gather-until 7 --usage)
sim "$MODEL" "${G[@]}" >"$WORK/once.plain" 2>/dev/null || fail "once: model without shim failed"
env FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=16MiB \
    LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${G[@]}" >"$WORK/once.shim" 2>"$WORK/once.err" \
    || { sed 's/^/    | /' "$WORK/once.err" >&2; fail "once: model under the shim failed"; }
cmp -s "$WORK/once.plain" "$WORK/once.shim" || fail "once: output differs from the run without the shim"
expect_grep 'plan \(memory mode, knapsack\): 28 of 33 units streamed through 2 slot\(s\) of 2\.0 MiB' "$WORK/once.err" \
    "once: the plan"
slots=$(sed -n 's/^usage after 12: .* slots \([0-9]*\) .*/\1/p' "$WORK/once.err")
[ -n "$slots" ] || { sed 's/^/    | /' "$WORK/once.err" >&2; fail "once: no usage after the last forward"; }
[ "$slots" -le $((4 << 20)) ] || { grep -E '^(usage|meminfo)' "$WORK/once.err" | sed 's/^/    | /' >&2
    fail "once: $slots bytes of streamed units held after forward 12, more than the 2 slots' 4 MiB"; }
free=$(sed -n 's/^meminfo after 12: free \([0-9]*\) .*/\1/p' "$WORK/once.err")
[ "${free:-0}" -gt 0 ] || fail "once: cudaMemGetInfo shows nothing free after forward 12 (${free:-none})"
[ "$(grep -c 'reads 28 streamed unit(s), 26 beyond the 2 slot(s)' "$WORK/once.err")" = 1 ] \
    || { sed 's/^/    | /' "$WORK/once.err" >&2; fail "once: the cat's loads over the slots not said exactly once"; }
expect_grep 'residency: 1 call\(s\) read more streamed units than the 2 slot\(s\) hold \(at most 26 beyond\); 2[6-9] unload\(s\) brought the units held back within the slots after them' \
    "$WORK/once.err" "once: the exit report counts the units unloaded beyond the slots"
pass "a cat of every layer once: loaded over the slots for it (said once), back within the 2 slots and the budget after it ($slots bytes held after the last forward); every forward's output the same"

# FT_SPILL: the cat runs from the first forward, on a 24 MiB budget for 66 MiB of
# weights in granules: each launch of it faults in every spilled weight, over the
# budget (said), and discovery, which sees the cat read every layer's weight, keeps
# them all resident (a budget no plan fits).
run spill 24MiB 1 0
expect_grep 'FT_SPILL: allocations past the budget \(24\.0 MiB\) start in host memory' "$WORK/spill.err" "spill: engaged"
expect_grep 'FT_SPILL: nothing more can leave the device; the budget is exceeded while a call needs more than it holds' \
    "$WORK/spill.err" "spill: the cat's allocations faulted in over the budget"
expect_grep 'verdict: no plan: the budget 24\.0 MiB is below the smallest that works' "$WORK/spill.err" "spill: weights shared"
pass "FT_SPILL: a cat reaching 99 regions before the plan faults every spilled weight in; same output"

# Discovery: the same cat from the first forward without FT_SPILL. Every weight is read
# outside its layer, so every one is shared and stays resident: nothing streams. With
# the regions past the 64th unseen, discovery took 33 weights for unshared, the plan
# streamed them, and the cat read them unloaded.
run disc 24MiB 0 0
expect_grep 'discovery: 2 iteration\(s\) of 100 launches, 33 units' "$WORK/disc.err" "discovery: units"
expect_grep 'verdict: no plan: the budget 24\.0 MiB is below the smallest that works' "$WORK/disc.err" \
    "discovery: every weight the cat reads is shared, so none streams"
pass "discovery sees all 99 regions of the cat: every weight it reads is shared and stays resident; same output"
