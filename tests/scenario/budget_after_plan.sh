# A budget that turns out too small after the plan: an activation larger than the plan
# saw (model --demote-after-plan: from forward 9 on, half the weights and a layer more
# each forward) does not fit a budget of a third of the weights even with every layer
# streamed. Resident layers are made to stream first; then the allocation is served
# past the budget (a program that runs without FlexTensor runs with it), said once,
# and the verdict gives the most the process went past it. Before, the application
# got cudaErrorMemoryAllocation (PyTorch raised OutOfMemoryError on the H200).
. "$(dirname "$0")/lib.sh"
M=(--layers 12 --dim 1024 --iters 14 --quiet --demote-after-plan 9)

sim "$MODEL" "${M[@]}" >"$WORK/plain.out" || fail "model without shim failed"
sim "$MODEL" "${M[@]:0:7}" >"$WORK/none.out" || fail "model without the option failed"
cmp -s "$WORK/plain.out" "$WORK/none.out" && fail "--demote-after-plan does not change the output: a lost activation would go unseen"

# 48 MiB of weights (12 layers of 4 MiB), a budget of 16 MiB; with and without FT_SPILL
for spill in 0 1; do
    err=$WORK/over-$spill.err
    FT_SPILL=$spill FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=16MiB \
        shim "$MODEL" "${M[@]}" >"$WORK/over-$spill.out" 2>"$err" \
        || { sed 's/^/    | /' "$err" >&2; fail "FT_SPILL=$spill: the program failed under a budget it outgrew"; }
    cmp -s "$WORK/plain.out" "$WORK/over-$spill.out" || fail "FT_SPILL=$spill: output differs"
    # resident layers stream first (the plan kept one)
    expect_grep 'allocating 24\.0 MiB would exceed the budget \(16\.0 MiB, .*\): unit\.[0-9]+ \(4\.0 MiB\) streams from now on' \
        "$err" "FT_SPILL=$spill: a resident layer made to stream first"
    n=$(grep -c 'cannot hold an allocation of' "$err" || true)
    [ "$n" = 1 ] || { sed 's/^/    | /' "$err" >&2; fail "FT_SPILL=$spill: the warning said $n times, want once"; }
    expect_grep 'warning: the memory budget \(16\.0 MiB: FT_GPU_MEM_LIMIT or FT_MAX_GPU_MEM_FRACTION\) cannot hold an allocation of 24\.0 MiB even with every weight that can leave the device streamed: it is served past the budget, which the process now exceeds by [0-9.]+ MiB \([0-9.]+ MiB held with the slots full, 24\.0 MiB of it non-weight memory\)\. .*give [0-9.]+ MiB or more \(ft-run --gpu-mem, FT_GPU_MEM_LIMIT\)' \
        "$err" "FT_SPILL=$spill: the warning names the budget, the size, the excess and the remedy"
    # the largest activation, 40 MiB, at forward 13: five allocations past the budget
    expect_grep 'verdict: offloaded: 12 of 12 units stream .*; budget exceeded by up to [0-9.]+ MiB after the plan \(5 allocation\(s\) served past it; non-weight memory alone needed 40\.0 MiB; a budget of [0-9.]+ MiB would have held it\)' \
        "$err" "FT_SPILL=$spill: the verdict gives the most"
    expect_no_grep '^flextensor: error' "$err" "FT_SPILL=$spill: no error"
done
pass "an activation the budget cannot hold even with every layer streamed is served past it: same output, exit 0, said once, the most in the verdict (FT_SPILL=0 and 1)"

# Two threads outgrowing the budget at once: the warning still once, same output
T=("${M[@]}" --threads 2 --lockstep)
sim "$MODEL" "${T[@]}" >"$WORK/t.plain" || fail "threads: model without shim failed"
FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=16MiB shim "$MODEL" "${T[@]}" >"$WORK/t.out" 2>"$WORK/t.err" \
    || { sed 's/^/    | /' "$WORK/t.err" >&2; fail "threads: the program failed"; }
cmp -s "$WORK/t.plain" "$WORK/t.out" || fail "threads: output differs"
[ "$(grep -c 'cannot hold an allocation of' "$WORK/t.err")" = 1 ] || fail "threads: the warning not said once"
expect_grep 'budget exceeded by up to [0-9.]+ MiB after the plan \(10 allocation\(s\) served past it' "$WORK/t.err" "threads: the verdict"
pass "two threads past the budget at once: same output, said once, ten allocations counted"

# The device's own failure is the application's: on a 36 MiB device, the 28 MiB
# activation of forward 10 does not fit beside the slots and the 24 MiB one's
# neighbours; cudaMalloc returns what the device said, and the verdict counts only the
# allocation the device served.
FTSIM_DEVICE_MEM=36MiB FT_SPILL=1 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=16MiB \
    shim "$MODEL" "${M[@]}" >/dev/null 2>"$WORK/dev.err" && fail "36 MiB device: a 28 MiB activation beside 12 MiB should fail"
expect_grep 'model: .*cudaMalloc\(\(void \*\*\)&act, bytes\) failed: out of memory' "$WORK/dev.err" "36 MiB device: the device's error reaches the program"
expect_grep 'budget exceeded by up to [0-9.]+ MiB after the plan \(1 allocation\(s\) served past it; non-weight memory alone needed 24\.0 MiB' \
    "$WORK/dev.err" "36 MiB device: only the allocation served is counted"
pass "a real device failure reaches the program as it is; only allocations the device served count as past the budget"
