# FT_CUPTI_AUDIT and FlexTensor's own calls inside a call of the application's:
# torch.profiler asserts at the profiler's exit when two CPU-side API records that
# start a flow share a correlation id (H200, torch 2.11: "inserted.second INTERNAL
# ASSERT FAILED", collection.cpp's setParents).
# The audit reads the program's RUNTIME and DRIVER records before the program gets them
# and reports every id carried twice; the program's records and output are unchanged.
# The simulator gives a call nested in an open one the outer call's id and records
# nested runtime calls (FTSIM_CUPTI_DUP_API writes one record twice). model --static-rt
# launches a kernel as cuBLAS does, from a runtime call FlexTensor cannot see: its
# pointer-table peek (a stream sync and a copy) and, after the plan, its loads and
# checksums run inside that call. Once the program holds CUPTI, FlexTensor makes them
# through the driver on its own-call thread, each under an id of its own (shim/cuda.c);
# before, they were runtime calls under the launch's id, two flow starts with it.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --iters 12 --quiet --profile-from 0)

run() { # NAME ENV... -- ARGS...: the model under the shim, out/err in $WORK/NAME.*
    local name=$1
    shift
    local env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    env FT_ENABLED=1 "${env[@]}" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${L[@]}" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "$name: the program failed"; }
}
records() { sed -n 's/^profiler: \([0-9]*\) runtime and driver API record.*/\1/p' "$1"; }
summary='CUPTI audit: [0-9]+ API records of the application.s profiler read'

sim "$MODEL" "${L[@]}" >"$WORK/plain.out" || fail "model without the shim failed"
[ "$(records "$WORK/plain.out")" -gt 0 ] || fail "the program recorded no API records"

# Silent when no id is carried twice; the program's output is unchanged. The program
# profiles from its first forward; in these three runs, whose record counts are compared
# with one another, FlexTensor stands down at the hand-over: carrying on, its own calls
# (loads, waits, checksums) are records of the program's profiler too, as many as the
# run's timing makes them.
run clean FT_CUPTI_AUDIT=1 FT_CUPTI_HANDOVER=stand-down --
expect_grep "$summary, 0 correlation id\(s\) seen twice, 0 of them" "$WORK/clean.err" "clean: summary"
expect_no_grep "correlation id [0-9]+ twice" "$WORK/clean.err" "clean"
[ "$(grep "^checksum" "$WORK/clean.out")" = "$(grep "^checksum" "$WORK/plain.out")" ] || fail "clean: checksum differs"
n=$(sed -En "s/.*CUPTI audit: ([0-9]+) API records.*/\1/p" "$WORK/clean.err")
[ "$n" = "$(records "$WORK/clean.out")" ] || fail "clean: the audit read $n records, the program $(records "$WORK/clean.out")"
pass "no id carried twice: one summary line, every record the program got was read"

# A record written twice: reported with both records, and counted; the program gets both.
run dup FT_CUPTI_AUDIT=1 FT_CUPTI_HANDOVER=stand-down FTSIM_CUPTI_DUP_API=44 --
expect_grep "warning: CUPTI audit: correlation id [0-9]+ twice: (RUNTIME|DRIVER) cu[A-Za-z_0-9]+ \(cbid [0-9]+, thread [0-9]+, [0-9]+-[0-9]+ ns\) and (RUNTIME|DRIVER) cu[A-Za-z_0-9]+ .*both start a flow in torch.profiler" \
    "$WORK/dup.err" "dup: the pair"
expect_grep "$summary, 1 correlation id\(s\) seen twice, 1 of them with two flow starts" "$WORK/dup.err" "dup: summary"
[ "$(records "$WORK/dup.out")" = "$(( $(records "$WORK/clean.out") + 1 ))" ] || fail "dup: the program did not get the record twice"
[ "$(grep "^checksum" "$WORK/dup.out")" = "$(grep "^checksum" "$WORK/plain.out")" ] || fail "dup: checksum differs"
pass "an id carried twice: both records named, counted, passed on unchanged"

# Off: nothing said, the record twice all the same.
run off FT_CUPTI_HANDOVER=stand-down FTSIM_CUPTI_DUP_API=44 --
expect_no_grep "CUPTI audit|FT_CUPTI_AUDIT" "$WORK/off.err" "audit off"
[ "$(records "$WORK/off.out")" = "$(records "$WORK/dup.out")" ] || fail "off: records differ"
pass "FT_CUPTI_AUDIT off: nothing said"

# FlexTensor's own calls inside a runtime call it cannot see (model --static-rt).
sim "$MODEL" "${L[@]}" --ptr-arrays --static-rt --profile-from 8 >"$WORK/static-plain.out" || fail "--static-rt without the shim failed"
# The program profiles from forward 8, after the plan.
run static-rt FT_CUPTI_AUDIT=1 -- --ptr-arrays --static-rt --profile-from 8
expect_grep "$summary, [0-9]+ correlation id\(s\) seen twice, 0 of them with two flow starts" "$WORK/static-rt.err" \
    "static-rt: no two flow starts under one id"
expect_no_grep "both start a flow" "$WORK/static-rt.err" "static-rt"
[ "$(grep "^checksum" "$WORK/static-rt.out")" = "$(grep "^checksum" "$WORK/static-plain.out")" ] || fail "static-rt: checksum differs"
expect_grep "verdict: offloaded: 12 of 12 units stream" "$WORK/static-rt.err" "static-rt: verdict"
pass "a runtime call FlexTensor cannot see: its own calls there, once the program profiles, carry ids of their own; same output and plan"

# The program profiles from its first forward, FlexTensor carrying on (the default:
# discovery, profiling and the plan under the program's profiler), at a third of the
# weights.
sim "$MODEL" "${L[@]}" --ptr-arrays --static-rt >"$WORK/carry-plain.out" || fail "--static-rt from 0 without the shim failed"
run carry FT_CUPTI_AUDIT=1 FT_GPU_MEM_LIMIT=16MiB -- --ptr-arrays --static-rt
expect_grep "$summary, [0-9]+ correlation id\(s\) seen twice, 0 of them with two flow starts" "$WORK/carry.err" \
    "carry-on: no two flow starts under one id"
[ "$(grep "^checksum" "$WORK/carry.out")" = "$(grep "^checksum" "$WORK/carry-plain.out")" ] || fail "carry-on: checksum differs"
expect_grep "verdict: offloaded: [1-9][0-9]* of 12 units stream \(memory mode.*before the plan: FlexTensor carried on" \
    "$WORK/carry.err" "carry-on: verdict"
pass "the program profiling from the start, FlexTensor carrying on (the default): planned and streamed, no two flow starts under one id"
