# The runtime control API (docs/control.md), called by the example model between its
# forwards (--control N:ACTION): a budget shrunk, refused when below what can be
# freed, and grown; sleep and wake (ft_release, ft_resume), with forwards run while
# released, also from a run whose plan streamed nothing and with several threads; a
# re-profile whose times leave the copy stalls out; a budget set before the plan.
# Every run's output equals the run without FlexTensor.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --quiet)

# usage_field FILE LABEL FIELD: FIELD of the "usage after LABEL:" line (the last one).
usage_field() {
    grep "^usage after $2: " "$1" | tail -1 | sed -E "s/.* $3 ([0-9]+).*/\\1/"
}

# 1. Shrink 40 -> 16 MiB after forward 7 (applied at the next pass boundary: units made
# to stream), 1 MiB refused after 10 (nothing changes), 64 MiB after 12: every unit
# resident again.
compare_run shrink --iters 15 --usage --control 7:limit=16M,10:limit=1M,12:limit=64M -- \
    FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB
E=$WORK/shrink.err
expect_grep '^control after 7: limit -> 0$' "$E" "shrink accepted"
expect_grep 'control: ft_set_gpu_mem_limit\(16\.0 MiB\): the plan is made again and the units move at the next pass boundary' "$E" "shrink waits for the boundary"
expect_grep 'control: new budget \(FT_GPU_MEM_LIMIT 16\.0 MiB\): 11 of 12 units stream through 2 slot\(s\) of 4\.0 MiB \(budget 16\.0 MiB\); 6 made to stream, 0 made resident' "$E" "shrink carried out"
[ "$(usage_field "$E" 'control 7' budget)" = 41943040 ] || fail "shrink: the budget changed before the pass boundary"
expect_grep '^control after 10: limit -> -2$' "$E" "1 MiB refused"
expect_grep 'error: control: ft_set_gpu_mem_limit\(1\.0 MiB\) refused: the budget 1\.0 MiB .* is below the smallest that works now, [0-9.]+ MiB, with [0-9.]+ MiB of non-weight memory; nothing changes' \
    "$E" "the refusal gives the smallest budget"
[ "$(usage_field "$E" 'control 10' budget)" = 16777216 ] || fail "refused: the budget is not 16 MiB any more"
total=$(usage_field "$E" 'control 10' total)
[ "$total" -le 16777216 ] || fail "after the shrink, $total bytes held over the 16 MiB budget"
expect_grep 'control: new budget \(FT_GPU_MEM_LIMIT 64\.0 MiB\): 0 of 12 units stream through 0 slot\(s\) .*; 0 made to stream, 11 made resident' "$E" "grown: every unit resident"
[ "$(usage_field "$E" 14 unmapped)" = 0 ] && [ "$(usage_field "$E" 14 budget)" = 67108864 ] \
    || fail "grown: weights still in host memory, or the budget not 64 MiB"
expect_grep 'verdict: .*at run time: 2 new budget\(s\), 0 re-plan\(s\), 0 release\(s\)' "$E" "the verdict counts the calls"
pass "budget 40 -> 16 MiB at the next pass boundary (held), 1 MiB refused with the smallest that works, 64 MiB: all resident; same output"

# 2. Sleep and wake: ft_release(0) refused; ft_release(1) leaves only the small weights
# FlexTensor cannot move; twice refused; forward 9 runs released (its units loaded on
# demand, as streamed ones); ft_resume brings the resident units back; twice refused.
compare_run sleep --iters 13 --usage --control 7:release0,8:release,8:release,9:resume,9:resume -- \
    FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB
E=$WORK/sleep.err
expect_grep '^control after 7: release0 -> -1$' "$E" "ft_release(0)"
expect_grep 'warning: control: ft_release\(0\) refused: not supported' "$E" "ft_release(0) says why"
expect_grep '^control after 8: release -> 0$' "$E" "ft_release(1)"
expect_grep 'control: ft_release: 12 of 12 units \(48\.0 MiB\) in pinned host memory \(registered in place\) now, 7 of them resident until now; 0\.1 MiB of weights stay on the device' "$E" "release moved every unit"
expect_grep '^control after 8: release -> -1$' "$E" "a second release"
expect_grep 'ft_release refused: released already' "$E" "a second release says why"
held=$(grep '^usage after control 8: ' "$E" | head -1 | sed -E 's/.* total ([0-9]+).*/\1/')
[ "$held" -lt 1048576 ] || fail "released: $held bytes still held through FlexTensor"
# ... on demand (a miss), or by the prefetching thread, which the call waits for when
# a move is under way (the units the thread was about to load)
expect_grep 'residency: .*: miss on unit\.0|waited for the prefetching thread: .* for units it was about to load \([1-9]' \
    "$E" "a forward while released loads what it touches"
expect_grep '^control after 9: resume -> 0$' "$E" "ft_resume"
expect_grep 'control: ft_resume: 7 unit\(s\) resident again' "$E" "resume brings the plan back"
expect_grep '^control after 9: resume -> -1$' "$E" "a second resume"
[ "$(grep '^usage after control 9: ' "$E" | head -1 | sed -E 's/.* resident ([0-9]+).*/\1/')" -gt 29000000 ] \
    || fail "resumed: the resident units are not back"
pass "ft_release(0) refused; ft_release(1) leaves 0.1 MiB of weights; a forward while released loads on demand; ft_resume: 7 resident units back; repeats refused; same output"

# 3. A run whose plan streamed nothing (budget above the model) sleeps and wakes, with
# FT_SPILL, twice; then a smaller budget makes it stream.
compare_run off --iters 15 --control 7:release,7:resume,9:release,10:resume,11:limit=16M -- \
    FT_SPILL=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=1GiB
E=$WORK/off.err
expect_grep 'plan \(memory mode, knapsack\): 0 of 12 units streamed' "$E" "off: nothing streamed at first"
[ "$(grep -cE 'control: ft_release: 12 of 12 units \(48\.0 MiB\) in pinned host memory \(registered in place\) now, 12 of them resident until now' "$E")" = 2 ] \
    || fail "off: two releases of every unit"
[ "$(grep -cE 'control: ft_resume: 12 unit\(s\) resident again' "$E")" = 2 ] || fail "off: two resumes"
expect_grep 'control: new budget \(FT_GPU_MEM_LIMIT 16\.0 MiB\): 11 of 12 units stream' "$E" "off: a smaller budget streams"
expect_grep 'verdict: offloaded: 11 of 12 units stream .*at run time: 1 new budget\(s\), 0 re-plan\(s\), 2 release\(s\)' "$E" "off: the verdict"
pass "a run whose plan streamed nothing (FT_SPILL on): released and resumed twice, then made to stream by a smaller budget; same output"

# 4. A smaller budget from a run whose plan streamed nothing starts the engine at the call.
compare_run off_limit --iters 12 --control 8:limit=16M -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=1GiB
expect_grep 'control: ft_set_gpu_mem_limit\(16\.0 MiB\): the residency engine starts; 11 of 12 units stream' \
    "$WORK/off_limit.err" "off: the engine starts"
pass "a smaller budget in a run that streamed nothing starts the residency engine at the call; same output"

# 5. Re-profile: at the link's speed, the units' new times are those profiling measured
# (within 5%); over a link 110 times slower, where a pass is mostly waiting for copies,
# they stay far below the measured step: the stalls are left out. Then a budget and a
# re-profile asked together: the plan made from the new times is for the new budget.
compare_run replan --iters 18 --control 8:replan -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=20MiB
E=$WORK/replan.err
expect_grep 'control: re-profiling 12 unit\(s\) over 3 pass\(es\) as they stream' "$E" "re-profile starts"
read -r now before < <(sed -nE 's/.*re-profiled over 3 pass\(es\): the units. compute ([0-9.]+) us a pass \(([0-9.]+) us before\).*/\1 \2/p' "$E")
[ -n "$now" ] || fail "replan: no re-profiled times"
awk -v a="$now" -v b="$before" 'BEGIN { exit !(a > 0.95 * b && a < 1.05 * b) }' \
    || fail "replan: re-profiled compute $now us against $before us from profiling"
expect_grep 'control: re-planned: 10 of 12 units stream' "$E" "replan: a new plan"
compare_run slow --iters 18 --control 8:replan -- FTSIM_H2D_GBPS=0.5 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=20MiB
now=$(sed -nE 's/.*re-profiled over 3 pass\(es\): the units. compute ([0-9.]+) us a pass.*/\1/p' "$WORK/slow.err")
step=$(sed -nE 's/.*measured step ([0-9.]+) us.*/\1/p' "$WORK/slow.err")
[ -n "$now" ] && [ -n "$step" ] || fail "slow link: no re-profiled times or measured step"
awk -v a="$now" -v s="$step" 'BEGIN { exit !(a < s / 2) }' || fail "slow link: re-profiled $now us a pass, a step $step us: stalls counted"
compare_run both --iters 18 --control 8:limit=16M,8:replan -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB
expect_grep 'control: re-planned: 11 of 12 units stream through 2 slot\(s\) of 4\.0 MiB \(budget 16\.0 MiB\)' "$WORK/both.err" "both: the re-plan for the new budget"
expect_no_grep 'control: new budget' "$WORK/both.err" "both: the budget waits for the re-profile"
pass "re-profile: ${now} us a pass over a slow link against a measured ${step} us step (stalls left out); at the link's speed within 5% of profiling; a budget set with it is planned for with the new times; same output"

# A release while passes are re-profiled gives the re-profile up; it starts again after
# the resume.
compare_run replan_release --iters 20 --control 8:replan,9:release,10:resume -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB
[ "$(grep -c 'control: re-profiling 12 unit' "$WORK/replan_release.err")" = 2 ] || fail "replan_release: not started again"
expect_grep 'control: re-planned: ' "$WORK/replan_release.err" "replan_release: planned at last"
pass "a release during a re-profile: started again after the resume, then planned; same output"

# 6. A budget set before the plan: the plan is made for it.
compare_run early --iters 8 --control 0:limit=16M -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB
expect_grep 'control: FT_GPU_MEM_LIMIT is 16\.0 MiB from now on \(was 40\.0 MiB\): the plan to come is made for it' "$WORK/early.err" "early: said"
expect_grep 'verdict: offloaded: 11 of 12 units stream \(memory mode, budget 16\.0 MiB' "$WORK/early.err" "early: the plan's budget"
pass "a budget set during discovery is the plan's; same output"

# 7. Three threads in lockstep: shrink, release, resume, grow, re-profile.
compare_run threads --iters 16 --threads 3 --lockstep \
    --control 7:limit=16M,8:release,9:resume,10:limit=40M,11:replan -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=30MiB
E=$WORK/threads.err
for want in 'control after 8: release -> 0' 'control after 9: resume -> 0' 'control: new budget \(FT_GPU_MEM_LIMIT 40\.0 MiB\)' \
            'control: re-planned'; do
    expect_grep "$want" "$E" "threads: $want"
done
pass "three threads: shrink, release, resume, grow and re-profile; same output"

# A CUDA graph captured and replayed while released (a budget set meanwhile waits for a
# resume that never comes): the graph reads all 12 units, released, more than the
# slots hold: it is cut into a segment per unit and each replay streams them between
# the segments, within the slots; released at exit.
compare_run graph --iters 12 --graph 3 --control 11:release,11:limit=20M -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB
expect_grep 'control: ft_set_gpu_mem_limit\(20\.0 MiB\): the plan is made again and the units move at ft_resume' "$WORK/graph.err" "graph: the budget waits for the resume"
expect_grep 'CUDA graphs: graph 0x[0-9a-f]+ reads 12 streamed unit\(s\), more than the 2 slot\(s\) hold: cut into 12 segment' "$WORK/graph.err" "graph: cut"
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 3 launch\(es\) of them streamed, 36 segment launch' "$WORK/graph.err" "graph: replays streamed"
expect_grep 'at most 8.0 MiB of streamed units held at once' "$WORK/graph.err" "graph: within the slots"
expect_grep 'verdict: .*1 release\(s\), released at exit' "$WORK/graph.err" "graph: released at exit"
pass "a graph captured and replayed while released is cut and streams what it reads within the slots; same output"

# 8. FlexTensor off: every call is -1, and nothing is said.
sim "$MODEL" "${L[@]}" --iters 6 >"$WORK/plain6.out"
FT_ENABLED=0 shim "$MODEL" "${L[@]}" --iters 6 --control 2:limit=16M,3:release,4:resume,5:replan \
    >"$WORK/disabled.out" 2>"$WORK/disabled.err" || fail "disabled: run failed"
cmp -s "$WORK/plain6.out" "$WORK/disabled.out" || fail "disabled: output differs"
[ "$(grep -c -- '-> -1$' "$WORK/disabled.err")" = 4 ] || fail "disabled: not every call -1"
expect_no_grep '^flextensor' "$WORK/disabled.err" "disabled: FlexTensor said something"
pass "FlexTensor off: every call -1, silent; same output"
