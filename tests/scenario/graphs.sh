# CUDA graphs (torch.cuda.graph's pattern: warm-up forwards, one decode forward
# captured on a non-blocking stream in global mode, then replays; model --graph N):
# FlexTensor must never break the capture, whichever phase it is in when the capture
# begins (discovery, profiling, or streaming after the plan), with FT_SPILL on and off,
# at a budget of a third of the weights and with every weight fitting. The simulator
# enforces CUDA's capture rules (a synchronisation, a query, a captured event queried,
# an unsafe call all invalidate the capture, and the model then fails), and the
# replays' checksums must equal those of the run without the shim: after the plan,
# the streamed units a graph reads are loaded before each of its launches.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --quiet --graph 3)

# run NAME ARGS -- ENV...: lib.sh's compare_run; the capture holds and the graph
# replays three times.
run() {
    compare_run "$@"
    expect_no_grep 'simcuda: stream capture' "$WORK/$1.err" "$1"
    [ "$(grep -c '^graph replay' "$WORK/$1.shim")" = 3 ] || fail "$1: not three replays"
}

# The default FT_DISCOVERY_ITERS and FT_PROFILING_ITERS: after 1 forward discovery is
# under way, after 4 profiling, after 12 the plan streams.
for spill in 1 0; do
    for budget in 16MiB 1GiB; do
        run disc-$spill-$budget --iters 1 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget
        expect_grep 'stream capture [0-9]+ began during discovery' "$WORK/disc-$spill-$budget.err" "disc-$spill-$budget"
        run prof-$spill-$budget --iters 4 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget
        expect_grep 'stream capture [0-9]+ began during profiling' "$WORK/prof-$spill-$budget.err" "prof-$spill-$budget"
        run plan-$spill-$budget --iters 12 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget
    done
    # At a third of the weights the plan streams, and the graph's units are loaded at
    # its launches (more than the slots: over them, said once).
    expect_grep 'verdict: offloaded' "$WORK/plan-$spill-16MiB.err" "plan-$spill-16MiB"
    expect_grep 'CUDA graphs: 3 launch\(es\) guarded, [1-9][0-9]* streamed unit\(s\) loaded' \
        "$WORK/plan-$spill-16MiB.err" "plan-$spill-16MiB"
    expect_grep 'graph 0x[0-9a-f]+ reads 11 streamed unit\(s\)' "$WORK/plan-$spill-16MiB.err" "plan-$spill-16MiB"
done
# Before the plan, FT_SPILL holds allocations in host memory, the captured forward's
# workspace among them (the model allocates it before its forwards and clears it first
# in the capture, as cuBLAS does): a captured memset of it cannot become a node (the
# simulator, like the H200, fails the call). FT_SPILL brings everything back before the
# capture begins and stops; the verdict says so.
for c in disc prof; do
    expect_grep 'FT_SPILL: a stream capture begins .* brought back to the device, over the budget' \
        "$WORK/$c-1-16MiB.err" "$c-1-16MiB"
    expect_grep 'verdict: .*FT_SPILL stopped when a stream capture began before the plan' "$WORK/$c-1-16MiB.err" "$c-1-16MiB"
done
pass "CUDA graph capture during discovery, profiling and streaming, FT_SPILL on and off, at 1/3 of the weights and all fitting: the capture holds, same replays, one verdict"
