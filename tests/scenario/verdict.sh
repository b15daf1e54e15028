# What a process says about FlexTensor (issue "A trustworthy baseline", section 3): one
# verdict line at exit, the last of the exit report (offloaded / no plan / stood down,
# and why); nothing at all from a process that made no CUDA call; a warning at the end
# of discovery for a unit pattern or an iteration marker that matched nothing; and at
# the first allocation, for a budget above the device's memory or an FT_GPU_DEVICE the
# process does not have.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 4 --dim 512 --iters 10 --quiet)
want=$(sim "$MODEL" "${ARGS[@]}" | tail -n 1)

# run NAME ENV...: the model under the shim with ENV; NAME.out and NAME.err in $WORK;
# its output must match the run without the shim.
run() {
    local name=$1
    shift
    env FT_ENABLED=1 FT_DISCOVERY_ITERS=2 "$@" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" \
        "$MODEL" "${ARGS[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "$name: the model failed"
    [ "$(tail -n 1 "$WORK/$name.out")" = "$want" ] || fail "$name: checksum differs from the run without the shim"
}
# verdict NAME REGEX: exactly one verdict line, the last one FlexTensor wrote, matching.
verdict() {
    [ "$(grep -c 'flextensor: verdict: ' "$WORK/$1.err")" = 1 ] || { sed 's/^/    | /' "$WORK/$1.err" >&2; fail "$1: not one verdict line"; }
    grep '^flextensor: ' "$WORK/$1.err" | tail -n 1 | grep -Eq -- "^flextensor: verdict: $2" \
        || { sed 's/^/    | /' "$WORK/$1.err" >&2; fail "$1: the last line is not the verdict /$2/"; }
}

# --- the verdict -------------------------------------------------------------------
run off
verdict off 'offloaded: 4 of 4 units stream \(latency mode, no budget, 4\.0 MiB planned\)$'
run mem FT_GPU_MEM_LIMIT=5MiB
verdict mem 'offloaded: 4 of 4 units stream \(memory mode, budget 5\.0 MiB, 4\.0 MiB planned\)$'
run roomy FT_GPU_MEM_LIMIT=64MiB
verdict roomy 'no plan: all 4 units stay resident: the budget 64\.0 MiB holds the whole model'
run small FT_GPU_MEM_LIMIT=1MiB
verdict small 'no plan: the budget 1\.0 MiB is below the smallest that works, 2\.0 MiB \(FT_GPU_MEM_LIMIT'
run early FT_DISCOVERY_ITERS=50
verdict early 'no plan: the program ended during discovery, after [0-9]+ of 50 iteration\(s\)'
run prof FT_PROFILING_ITERS=50
verdict prof 'no plan: the program ended during profiling, after [0-9]+ of 50 pass\(es\) timed'
run quiet FT_LOG_LEVEL=warn
[ ! -s "$WORK/quiet.err" ] || { sed 's/^/    | /' "$WORK/quiet.err" >&2; fail "FT_LOG_LEVEL=warn: the run wrote to stderr"; }
pass "one verdict line, the last: offloaded (latency, memory), no plan (budget holds all, budget too small, ended in discovery or profiling); none at FT_LOG_LEVEL=warn"

# --- the phase's moves, one line each at FT_LOG_LEVEL=debug -------------------------
# moves NAME MOVE...: the run's moves between phases were exactly these, in this order,
# and none was refused.
moves() {
    local name=$1 got want
    shift
    got=$(sed -n 's/^flextensor: engine: \(.* -> .*\)$/\1/p' "$WORK/$name.err" | paste -sd , -)
    want=$(IFS=,; echo "$*")
    [ "$got" = "$want" ] || fail "$name: the moves were '$got', not '$want'"
    expect_no_grep 'engine: the move from .* is not allowed' "$WORK/$name.err" "$name"
}
run mvmem FT_LOG_LEVEL=debug FT_GPU_MEM_LIMIT=5MiB
moves mvmem 'start -> discovery' 'discovery -> planning' 'planning -> profiling' 'profiling -> planning' \
    'planning -> planned' 'planned -> streaming'
run mvroomy FT_LOG_LEVEL=debug FT_GPU_MEM_LIMIT=64MiB
moves mvroomy 'start -> discovery' 'discovery -> planning' 'planning -> profiling' 'profiling -> planning' \
    'planning -> off'
run mvnodev FT_LOG_LEVEL=debug FT_GPU_DEVICE=1
moves mvnodev 'start -> discovery' 'discovery -> stood down'
pass "the phase moves through discovery, planning, profiling, planning again, then planned and streaming, or off; a missing device: stood down"

# --- discovery and profiling are bounded (FT_OBSERVE_MAX_LAUNCHES) -----------------
# A discovery that cannot conclude in that many launches (here: 50 iterations wanted of
# 10) stands down: CUPTI released, calls pass through, and FT_SPILL's allocations come
# back to the device (a budget under the model). Profiling that reaches the bound plans
# from the passes it timed.
run bound FT_DISCOVERY_ITERS=50 FT_OBSERVE_MAX_LAUNCHES=60 FT_LOG_LEVEL=debug
verdict bound 'stood down: discovery did not find the program.s passes in 60 launches \(FT_OBSERVE_MAX_LAUNCHES\)$'
moves bound 'start -> discovery' 'discovery -> stood down'
expect_grep 'CUPTI saw .*; CUPTI was detached' "$WORK/bound.err" "CUPTI released at the stand-down"
run boundspill FT_DISCOVERY_ITERS=50 FT_OBSERVE_MAX_LAUNCHES=60 FT_GPU_MEM_LIMIT=3MiB FT_SPILL=1
expect_grep 'FT_SPILL: FlexTensor stands down: [0-9.]+ MiB brought back to the device, over the budget' "$WORK/boundspill.err" "FT_SPILL's allocations back"
verdict boundspill 'stood down: discovery did not find the program.s passes in 60 launches'
run boundprof FT_PROFILING_ITERS=50 FT_OBSERVE_MAX_LAUNCHES=60 FT_GPU_MEM_LIMIT=5MiB
expect_grep 'warning: profiling: 60 launches \(FT_OBSERVE_MAX_LAUNCHES\) and [0-9]+ of the passes wanted timed; planning from those' \
    "$WORK/boundprof.err" "profiling's bound"
verdict boundprof 'offloaded: 4 of 4 units stream \(memory mode'
run nobound FT_DISCOVERY_ITERS=50 FT_OBSERVE_MAX_LAUNCHES=0
verdict nobound 'no plan: the program ended during discovery'
pass "discovery bounded: stands down at FT_OBSERVE_MAX_LAUNCHES (CUPTI released, FT_SPILL's allocations back); profiling plans from what it timed; 0 = no bound"

# --- a process that made no CUDA call says nothing ----------------------------------
FT_ENABLED=1 shim /bin/true >"$WORK/true.out" 2>"$WORK/true.err" || fail "/bin/true failed"
FT_ENABLED=1 shim sh -c 'echo hi | cat | wc -c; /bin/true' >"$WORK/sh.out" 2>"$WORK/sh.err" || fail "pipeline failed"
FT_ENABLED=1 noleaks shim python3 -c 'import subprocess
for _ in range(3):
    subprocess.run(["true"], check=True)' >"$WORK/py.out" 2>"$WORK/py.err" || fail "python launcher failed"
for f in true sh py; do
    [ ! -s "$WORK/$f.err" ] || { sed 's/^/    | /' "$WORK/$f.err" >&2; fail "$f: a process without CUDA calls wrote to stderr"; }
done
# A launcher (a shell that forks) around the model: one report, the model's.
FT_ENABLED=1 FT_DISCOVERY_ITERS=2 shim sh -c '/bin/true; "$1" --layers 4 --dim 512 --iters 10 --quiet | cat; /bin/true' \
    sh "$MODEL" >"$WORK/l.out" 2>"$WORK/l.err" || fail "launcher around the model failed"
for what in 'enabled in pid' 'summary: ' 'verdict: '; do
    [ "$(grep -c "flextensor: $what" "$WORK/l.err")" = 1 ] || { sed 's/^/    | /' "$WORK/l.err" >&2; fail "launcher: not one '$what' line"; }
done
pass "/bin/true, a shell pipeline, a python launcher: stderr empty; a launcher around the model: one report"

# --- patterns and markers that match nothing ----------------------------------------
run pat FT_INCLUDE_PATTERNS='unit.[0-3],nomatch*' FT_EXCLUDE_PATTERNS='size:>=1GiB' FT_ITERATION_MARKER='no_such_kernel*'
expect_grep "warning: FT_INCLUDE_PATTERNS: 'nomatch\*' matches none of the 4 units, unit\.0 \.\. unit\.3$" "$WORK/pat.err" "include"
expect_grep "warning: FT_EXCLUDE_PATTERNS: 'size:>=1GiB' matches none of the 4 units" "$WORK/pat.err" "exclude"
expect_grep "warning: FT_ITERATION_MARKER: 'no_such_kernel\*' matches none of the [0-9]+ kernels launched during discovery; iterations were found by the automatic detector" \
    "$WORK/pat.err" "marker"
expect_no_grep "'unit\.\[0-3\]' matches none" "$WORK/pat.err" "a pattern that matches"
verdict pat 'offloaded: 4 of 4 units stream'
run none FT_INCLUDE_PATTERNS='layer*'
expect_grep "FT_INCLUDE_PATTERNS: 'layer\*' matches none of the 4 units, unit\.0 \.\. unit\.3; no pattern matches, so every unit stays resident" \
    "$WORK/none.err" "include matching nothing"
verdict none 'no plan: all 4 units stay resident: FT_INCLUDE_PATTERNS keeps every one'
run match FT_INCLUDE_PATTERNS='unit.*' FT_EXCLUDE_PATTERNS='unit.3'
expect_no_grep 'warning' "$WORK/match.err" "patterns that match"
verdict match 'offloaded: 3 of 4 units stream .*; 1 kept resident by FT_INCLUDE_PATTERNS and FT_EXCLUDE_PATTERNS\)$'
pass "an include, exclude or marker pattern that matches nothing: a warning naming the option and the pattern"

# --- options the device cannot honour, said at the first allocation -----------------
run big FTSIM_DEVICE_MEM=1GiB FT_GPU_MEM_LIMIT=2GiB
expect_grep 'warning: FT_GPU_MEM_LIMIT \(2\.00 GiB\) is more than device 0 has \(1\.00 GiB\)' "$WORK/big.err" "budget above the device"
grep -n . "$WORK/big.err" | grep -E 'FT_GPU_MEM_LIMIT|discovery: ' | head -n 1 | grep -q FT_GPU_MEM_LIMIT \
    || fail "the budget warning comes after discovery"
run bigspill FTSIM_DEVICE_MEM=1GiB FT_GPU_MEM_LIMIT=2GiB FT_SPILL=1
expect_grep 'FT_GPU_MEM_LIMIT \(2\.00 GiB\) is more than device 0 has \(1\.00 GiB\): FT_SPILL moves nothing to host memory before the device is full' \
    "$WORK/bigspill.err" "budget above the device, FT_SPILL"
run fits FTSIM_DEVICE_MEM=1GiB FT_GPU_MEM_LIMIT=1GiB
expect_no_grep 'FT_GPU_MEM_LIMIT' "$WORK/fits.err" "a budget the device holds"
run nodev FT_GPU_DEVICE=1
expect_grep '^flextensor: warning: FT_GPU_DEVICE=1, but this process sees 1 CUDA device\(s\).* stands down' "$WORK/nodev.err" "missing device"
expect_no_grep 'managing device|several GPUs|discovery: [0-9]' "$WORK/nodev.err" "missing device"
verdict nodev 'stood down: FT_GPU_DEVICE=1, but this process sees 1 CUDA device\(s\)'
run twodev FTSIM_DEVICE_COUNT=2 FT_GPU_DEVICE=1
expect_no_grep 'sees [0-9]+ CUDA device' "$WORK/twodev.err" "FT_GPU_DEVICE=1 of 2"
pass "FT_GPU_MEM_LIMIT above the device, FT_GPU_DEVICE past the devices: a warning at the first allocation"
