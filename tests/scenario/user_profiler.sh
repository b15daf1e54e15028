# The user's profiler wins: a program that profiles itself with CUPTI as torch.profiler
# does (model --profile-from N: cuptiSubscribe, kernel and copy records, driver
# callbacks) gets CUPTI whenever it asks, and records the same kernels of its own as
# without FlexTensor; the output is unchanged. FlexTensor carries on, before the plan
# and after it; with FT_CUPTI_HANDOVER=stand-down it stands down before the plan. FlexTensor's own kernels show under their
# own name (ft_checksum), its copies as copies. Before CUDA 13.3 a process has one
# subscriber (the simulator too): without the hand-over, the program's subscribe would
# fail with error 39 while FlexTensor holds CUPTI.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --iters 12 --quiet)
LINKED=$BUILD/examples/model-sim-cupti

# The simulator is strict: a second subscriber gets error 39, and so does the program.
set +e
FTSIM_CUPTI_HELD=1 sim "$MODEL" "${L[@]}" --profile-from 0 >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "the program's subscribe succeeded while another subscriber held CUPTI"
expect_grep "cuptiSubscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED \(39\)" "$WORK/err" "strict simulator"
pass "a second subscriber gets error 39 (CUDA before 13.3, the simulator)"

# what FROM: the program's records from forward FROM on, without the shim.
for from in 0 3 4 5 8; do
    sim "$MODEL" "${L[@]}" --profile-from $from >"$WORK/plain-$from" || fail "from $from: model without shim failed"
done
model_kernels() { sed -n 's/^profiler: \([0-9]*\) model kernel.*/\1/p' "$1"; }

# check NAME FROM PROGRAM ENV...: the program under the shim subscribes at forward
# FROM; its model kernels and checksum equal the run without the shim; other kernels
# are FlexTensor's; one line says CUPTI was handed over or was not held.
check() {
    local name=$1 from=$2 prog=$3
    shift 3
    env FT_ENABLED=1 "$@" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$prog" "${L[@]}" --profile-from "$from" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" \
        || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "$name: the program failed (its subscribe?)"; }
    local want got
    want=$(model_kernels "$WORK/plain-$from")
    got=$(model_kernels "$WORK/$name.out")
    [ -n "$want" ] && [ "$want" -gt 0 ] || fail "$name: no model kernels recorded without the shim"
    [ "$got" = "$want" ] || fail "$name: $got model kernels recorded, $want without the shim"
    [ "$(grep '^checksum' "$WORK/$name.out")" = "$(grep '^checksum' "$WORK/plain-$from")" ] \
        || fail "$name: checksum differs from the run without the shim"
    ! grep -q '^profiler: other kernels:' "$WORK/$name.out" \
        || grep -Eq '^profiler: other kernels: ft_[a-z_]+(,ft_[a-z_]+)*$' "$WORK/$name.out" \
        || fail "$name: kernels other than the model's and FlexTensor's: $(grep 'other kernels' "$WORK/$name.out")"
    [ "$(grep -Ec "CUPTI handed to the application's subscriber|the application uses CUPTI \(" "$WORK/$name.err")" = 1 ] \
        || fail "$name: not one line about the hand-over"
    expect_grep "^flextensor: verdict: .*; the application's profiler had CUPTI from [a-z ]+ on" "$WORK/$name.err" "$name: verdict"
}

# FT_CUPTI_HANDOVER=stand-down, with default settings otherwise (FT_SPILL on, no
# budget) and at a third of the weights (16 of 48 MiB); the program asks during
# discovery, during profiling and after the plan; through dlopen and dlsym (model-sim)
# and through a linked libcupti (model-sim-cupti).
for setting in default budget; do
    env=(FT_SPILL=1 FT_CUPTI_HANDOVER=stand-down)
    [ $setting = default ] || env+=(FT_GPU_MEM_LIMIT=16MiB)
    for prog in "$MODEL" "$LINKED"; do
        how=dlsym
        [ "$prog" = "$MODEL" ] || how=linked
        check $setting-$how-0 0 "$prog" "${env[@]}"
        expect_grep "CUPTI handed to the application's subscriber \(cuptiSubscribe, during discovery\); FlexTensor times with CUDA events" \
            "$WORK/$setting-$how-0.err" "$setting-$how-0: hand-over"
        check $setting-$how-3 3 "$prog" "${env[@]}"
        expect_grep "CUPTI handed to the application's subscriber \(cuptiSubscribe, during profiling\)" \
            "$WORK/$setting-$how-3.err" "$setting-$how-3: hand-over"
        for f in 0 3; do
            expect_grep "verdict: stood down: the application's profiler took CUPTI before the plan .*FlexTensor stood down" \
                "$WORK/$setting-$how-$f.err" "$setting-$how-$f: stands down before the plan"
        done
        check $setting-$how-8 8 "$prog" "${env[@]}"
        expect_grep "the application uses CUPTI \(cuptiSubscribe, during (streaming|off)\); FlexTensor did not hold it" \
            "$WORK/$setting-$how-8.err" "$setting-$how-8: released after profiling"
    done
done
expect_grep "verdict: offloaded: [1-9][0-9]* of 12 units stream \(memory mode" "$WORK/budget-dlsym-8.err" "a third: streams"
expect_grep "CUPTI: the application's profiler took it \(cuptiSubscribe\) during streaming; FlexTensor's own copies since.*: [1-9][0-9]* region load" \
    "$WORK/budget-linked-8.err" "own copies counted"
pass "FT_CUPTI_HANDOVER=stand-down: subscribe during discovery, profiling (FlexTensor stands down), after the plan (it streams on) (default settings, a third of the weights; dlsym and linked): same model kernels and output"

# By default (FT_CUPTI_HANDOVER=carry-on), asked during discovery or profiling,
# FlexTensor hands CUPTI over and carries on: it plans and streams at a third of the
# weights, timing with CUDA events, and the program records the same kernels of its own.
for from in 0 3; do
    for prog in "$MODEL" "$LINKED"; do
        how=dlsym
        [ "$prog" = "$MODEL" ] || how=linked
        check carry-$how-$from $from "$prog" FT_GPU_MEM_LIMIT=16MiB
        expect_grep "verdict: offloaded: [1-9][0-9]* of 12 units stream \(memory mode.*before the plan: FlexTensor carried on" \
            "$WORK/carry-$how-$from.err" "carry-$how-$from: carried on"
        expect_no_grep "stood down" "$WORK/carry-$how-$from.err" "carry-$how-$from"
    done
done
pass "by default: subscribe during discovery or profiling, FlexTensor carries on, plans and streams; same model kernels and output"

# FT_CUPTI_CONFIRM=first-pass: CUPTI is detached after discovery's first pass and
# attached again for profiling (from forward 5): the program asking
# in between finds it free, and FlexTensor carries on, profiling with CUDA events (no
# profiling takes it back); asking during profiling, it gets it from FlexTensor.
first=(FT_DISCOVERY_ITERS=3 FT_CUPTI_CONFIRM=first-pass FT_GPU_MEM_LIMIT=16MiB)
check confirm-4 4 "$MODEL" "${first[@]}"
expect_grep "detached until profiling \(FT_CUPTI_CONFIRM=first-pass\)" "$WORK/confirm-4.err" "first-pass: detached"
expect_grep "the application uses CUPTI \(cuptiSubscribe, during discovery\); FlexTensor did not hold it" "$WORK/confirm-4.err" "first-pass: not held"
expect_grep "CUPTI not attached again for profiling: the application's profiler uses CUPTI" "$WORK/confirm-4.err" "first-pass: not taken back"
expect_grep "verdict: offloaded: [1-9][0-9]* of 12 units stream .*before the plan: FlexTensor carried on" "$WORK/confirm-4.err" "first-pass: carried on"
check confirm-5 5 "$LINKED" "${first[@]}"
expect_grep "CUPTI handed to the application's subscriber \(cuptiSubscribe, during profiling\)" "$WORK/confirm-5.err" "first-pass: attached again, handed over"
pass "FT_CUPTI_CONFIRM=first-pass: the program's CUPTI is not taken back for profiling, and is handed over after it was"

# FT_OBSERVE_MAX_LAUNCHES: FlexTensor stands down at the bound and lets CUPTI go then;
# the program, asking later, finds it free.
check bound 8 "$MODEL" FT_OBSERVE_MAX_LAUNCHES=40 FT_DISCOVERY_ITERS=100
expect_grep "verdict: stood down: discovery did not find the program.s passes in 40 launches" "$WORK/bound.err" "bound: stood down"
expect_grep "the application uses CUPTI \(cuptiSubscribe, during stood down\); FlexTensor did not hold it" "$WORK/bound.err" "bound: released"
pass "FT_OBSERVE_MAX_LAUNCHES: CUPTI released at the bound"

# FT_ENABLED=0: the wrappers forward, nothing is said.
FT_ENABLED=0 shim "$MODEL" "${L[@]}" --profile-from 0 >"$WORK/off.out" 2>"$WORK/off.err" || fail "FT_ENABLED=0: the program failed"
cmp -s "$WORK/off.out" "$WORK/plain-0" || fail "FT_ENABLED=0: output differs"
expect_no_grep "flextensor" "$WORK/off.err" "FT_ENABLED=0"
pass "FT_ENABLED=0: the program's CUPTI calls pass through"
