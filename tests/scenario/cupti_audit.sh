# FT_CUPTI_AUDIT and FT_DRIVER_OWN_CALLS: torch.profiler asserts at the profiler's exit
# when two CPU-side API records that start a flow share a correlation id (H200, torch
# 2.11: "inserted.second INTERNAL ASSERT FAILED", collection.cpp's setParents).
# The audit reads the program's RUNTIME and DRIVER records before the program gets them
# and reports every id carried twice; the program's records and output are unchanged.
# The simulator gives a call nested in an open one the outer call's id and records
# nested runtime calls (FTSIM_CUPTI_DUP_API writes one record twice). model --static-rt
# launches a kernel as cuBLAS does, from a runtime call FlexTensor cannot see: its
# pointer-table peek (a stream sync and a copy) and, after the plan, its loads then run
# inside that call; FT_DRIVER_OWN_CALLS=driver makes them through the driver (on the
# simulator that gives them ids of their own; on the H200 torch.profiler still
# asserted with it, bench/RESULTS.md).
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

# Silent when no id is carried twice; the program's output is unchanged.
run clean FT_CUPTI_AUDIT=1 --
expect_grep "$summary, 0 correlation id\(s\) seen twice, 0 of them" "$WORK/clean.err" "clean: summary"
expect_no_grep "correlation id [0-9]+ twice" "$WORK/clean.err" "clean"
[ "$(grep "^checksum" "$WORK/clean.out")" = "$(grep "^checksum" "$WORK/plain.out")" ] || fail "clean: checksum differs"
n=$(sed -En "s/.*CUPTI audit: ([0-9]+) API records.*/\1/p" "$WORK/clean.err")
[ "$n" = "$(records "$WORK/clean.out")" ] || fail "clean: the audit read $n records, the program $(records "$WORK/clean.out")"
pass "no id carried twice: one summary line, every record the program got was read"

# A record written twice: reported with both records, and counted; the program gets both.
run dup FT_CUPTI_AUDIT=1 FTSIM_CUPTI_DUP_API=44 --
expect_grep "warning: CUPTI audit: correlation id [0-9]+ twice: (RUNTIME|DRIVER) cu[A-Za-z_0-9]+ \(cbid [0-9]+, thread [0-9]+, [0-9]+-[0-9]+ ns\) and (RUNTIME|DRIVER) cu[A-Za-z_0-9]+ .*both start a flow in torch.profiler" \
    "$WORK/dup.err" "dup: the pair"
expect_grep "$summary, 1 correlation id\(s\) seen twice, 1 of them with two flow starts" "$WORK/dup.err" "dup: summary"
[ "$(records "$WORK/dup.out")" = "$(( $(records "$WORK/clean.out") + 1 ))" ] || fail "dup: the program did not get the record twice"
[ "$(grep "^checksum" "$WORK/dup.out")" = "$(grep "^checksum" "$WORK/plain.out")" ] || fail "dup: checksum differs"
pass "an id carried twice: both records named, counted, passed on unchanged"

# Off: nothing said, the record twice all the same.
run off FTSIM_CUPTI_DUP_API=44 --
expect_no_grep "CUPTI audit|FT_CUPTI_AUDIT" "$WORK/off.err" "audit off"
[ "$(records "$WORK/off.out")" = "$(records "$WORK/dup.out")" ] || fail "off: records differ"
pass "FT_CUPTI_AUDIT off: nothing said"

# FlexTensor's own calls inside a runtime call it cannot see (model --static-rt).
sim "$MODEL" "${L[@]}" --ptr-arrays --static-rt --profile-from 8 >"$WORK/static-plain.out" || fail "--static-rt without the shim failed"
# The program profiles from forward 8, after the plan: asking before it, it would make
# FlexTensor stand down (handover.c), and FlexTensor's calls would stop.
run static-rt FT_CUPTI_AUDIT=1 -- --ptr-arrays --static-rt --profile-from 8
expect_grep "warning: CUPTI audit: correlation id [0-9]+ twice: RUNTIME cuda[A-Za-z]+ .* and RUNTIME cuda[A-Za-z]+ .*one inside the other on one thread; both start a flow" \
    "$WORK/static-rt.err" "static-rt: the loads' calls inside the launch"
run static-drv FT_CUPTI_AUDIT=1 FT_DRIVER_OWN_CALLS=driver -- --ptr-arrays --static-rt --profile-from 8
expect_grep "$summary, 0 correlation id\(s\) seen twice" "$WORK/static-drv.err" "FT_DRIVER_OWN_CALLS=driver"
for r in static-rt static-drv; do
    [ "$(grep "^checksum" "$WORK/$r.out")" = "$(grep "^checksum" "$WORK/static-plain.out")" ] || fail "$r: checksum differs"
    expect_grep "verdict: offloaded: 12 of 12 units stream" "$WORK/$r.err" "$r: verdict"
done
pass "a runtime call FlexTensor cannot see: its own calls there share the call's id (runtime), none does (FT_DRIVER_OWN_CALLS=driver); same output and plan"
