# A model freed, another loaded (issue #9; bench/RESULTS.md's free_load: on the H200,
# model B, loaded after model A's plan was made and A deleted, was never discovered or
# streamed, and the process peaked at 3661 MiB against a 970 MiB budget). The example
# model's --reload 12 frees every weight after forward 12 and uploads a model of the
# same shape from another seed; at a budget of a third of the weights, FlexTensor must
# drop the first plan, discover and plan again, and stream the second model within the
# budget, with the output of a run without it. Before reload.c, the second model was
# served past the budget (a peak of 48 MiB against 16) and the verdict said so.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --iters 30)

# peak_within NAME MIB: the simulator's whole-run peak of physical device memory, as
# read from outside the process (FTSIM_REPORT_PEAK), is within MIB MiB.
peak_within() {
    local peak
    peak=$(sed -n 's/^simcuda: device 0: peak physical memory \([0-9]*\) bytes.*/\1/p' "$WORK/$1.err")
    [ -n "$peak" ] || fail "$1: the simulator reported no peak"
    [ "$peak" -le $(($2 << 20)) ] || fail "$1: peak $peak bytes, over the $2 MiB budget"
    echo "$((peak >> 10)) KiB"
}

# second_plan NAME: the log says the plan went, discovery found the second model and
# a second plan streams it; the verdict says it, and that the budget held after the plan.
second_plan() {
    local e="$WORK/$1.err"
    expect_grep 'the program freed [0-9.]+ MiB of the plan.s 48\.1 MiB of weights: the plan is dropped.*discovery starts again' "$e" "$1: the plan dropped"
    [ "$(grep -c 'discovery: 1 iteration(s) of 36 launches, 12 units, 48\.1 MiB of weights' "$e")" = 2 ] \
        || { sed 's/^/    | /' "$e" >&2; fail "$1: the second model was not discovered"; }
    [ "$(grep -c 'residency: 11 unit(s), 44\.0 MiB, moved to pinned host memory' "$e")" = 2 ] \
        || { sed 's/^/    | /' "$e" >&2; fail "$1: the second plan does not stream"; }
    expect_grep 'verdict: offloaded: 11 of 12 units stream .*; planned again after the program freed the first plan.s weights' "$e" "$1: verdict"
    expect_no_grep 'budget exceeded' "$e" "$1: the budget held after the plan"
}

# FT_SPILL's default (lib.sh sets 0 for the other scripts): on. Before each plan it
# holds the budget, so the whole run's peak stays within it.
compare_run spill --reload 12 -- FT_SPILL=1 FTSIM_REPORT_PEAK=1 FT_GPU_MEM_LIMIT=16MiB
second_plan spill
p1=$(peak_within spill 16)
compare_run spill2 --reload 12 --threads 2 -- FT_SPILL=1 FTSIM_REPORT_PEAK=1 FT_GPU_MEM_LIMIT=16MiB
second_plan spill2
p2=$(peak_within spill2 16)
pass "a model freed after the plan, another loaded: discovered, planned and streamed again, same output, peak $p1 of 16 MiB (two threads: $p2)"

# Without FT_SPILL the budget holds from the plan on: each model loads whole before its
# plan, as the first did, and after the second plan nothing is served past the budget.
compare_run nospill --reload 12 -- FT_GPU_MEM_LIMIT=16MiB
second_plan nospill
pass "the same with FT_SPILL=0: planned again, the budget held after each plan"

# A program that frees its model at its end (the example model frees every weight
# before it exits) loads nothing after: its plan and verdict stay. And one that frees a
# layer (a unit partly, --drop) keeps its plan: that free is the engine's alone.
compare_run end -- FT_SPILL=1 FT_GPU_MEM_LIMIT=16MiB
expect_no_grep 'plan is dropped|planned again' "$WORK/end.err" "weights freed at exit"
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/end.err" "weights freed at exit: verdict"
compare_run drop --drop 14 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=16MiB
expect_no_grep 'plan is dropped|planned again' "$WORK/drop.err" "one layer freed"
pass "weights freed at exit, or one layer freed: the plan stays"

# With offload timing on, the timing stops with the plan it timed: its per-unit rows
# follow the first plan's units, and the second plan's would land in the wrong rows.
compare_run timing --reload 12 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=16MiB FT_OFFLOAD_TIMING=on
second_plan timing
expect_grep 'offload timing: stopped with the plan it timed' "$WORK/timing.err" "timing stopped at the drop"
pass "offload timing on: stopped with the first plan, same output"
