# The CUPTI observer: it confirms every driver launch went through the wrappers, says
# once when another subscriber holds CUPTI and carries on, and FT_CUPTI=on makes that
# an error; the application's results never change.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 4 --dim 256 --iters 4 --quiet)
want=$(sim "$MODEL" "${ARGS[@]}")

FT_ENABLED=1 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" || fail "model under shim failed"
[ "$(cat "$WORK/out")" = "$want" ] || fail "output changed"
expect_grep "CUPTI saw [1-9][0-9]* launches.*all went through FlexTensor's wrappers" "$WORK/err" "observer summary"
# The simulated libcupti's cuptiActivityEnable calls its exported
# cuptiActivityEnableContext, which the shim's export answers: libcupti's own call, not
# an application asking (user_profiler.sh has those).
FT_ENABLED=1 shim "$MODEL" --layers 4 --dim 256 --iters 8 --quiet >"$WORK/out" 2>"$WORK/err" || fail "model under shim failed"
expect_grep "profiling: [1-9] of [0-9]+ pass\(es\) timed from CUPTI activity records" "$WORK/err" "CUPTI timing"
expect_no_grep "handed to the application|the application uses CUPTI|application's profiler" "$WORK/err" "no profiler"
pass "CUPTI confirms every launch went through the wrappers, and times kernels; libcupti's calls to itself hand nothing over"

FT_ENABLED=1 FTSIM_CUPTI_HELD=1 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" \
    || fail "model failed when CUPTI is held"
[ "$(cat "$WORK/out")" = "$want" ] || fail "output changed when CUPTI is held"
expect_grep "warning: CUPTI is held by another subscriber" "$WORK/err" "held warning"
[ "$(grep -c 'held by another subscriber' "$WORK/err")" = 1 ] || fail "the held warning is not said once"
expect_grep "discovery: done" "$WORK/err" "discovery without CUPTI"
pass "CUPTI held by another subscriber: said once, discovery carries on"

set +e
FT_ENABLED=1 FT_CUPTI=on FTSIM_CUPTI_HELD=1 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "FT_CUPTI=on with CUPTI held: exit $rc, want 2"
[ ! -s "$WORK/out" ] || fail "FT_CUPTI=on with CUPTI held: the application ran"
expect_grep "FT_CUPTI=on but CUPTI is held" "$WORK/err" "FT_CUPTI=on error"
pass "FT_CUPTI=on and CUPTI unavailable: exit 2 before main"

FT_ENABLED=1 FT_CUPTI=off shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" || fail "FT_CUPTI=off run failed"
expect_no_grep "CUPTI" "$WORK/err" "FT_CUPTI=off"
pass "FT_CUPTI=off: CUPTI never loaded"

# A launch through a driver path the wrappers do not see (--bypass-from: the driver's
# cuLaunchKernel reached without its exported symbol): CUPTI counts it and the exit
# summary names it; with FT_CUPTI_CONFIRM=first-pass, CUPTI then stays attached.
FT_ENABLED=1 FT_DISCOVERY_ITERS=3 shim "$MODEL" "${ARGS[@]}" --bypass-from 1 >"$WORK/out" 2>"$WORK/err" \
    || fail "model with bypassing launches failed"
[ "$(cat "$WORK/out")" = "$want" ] || fail "bypass: output changed"
expect_grep "warning: CUPTI saw [0-9]+ launches, .* of which [1-9][0-9]*, 0, 0 bypassed FlexTensor's wrappers \(first: cuLaunchKernel: _Z9model_mixPjPKji\)" \
    "$WORK/err" "bypass reported"
pass "a launch that bypasses the wrappers: CUPTI counts it, the summary names its kernel"
FT_ENABLED=1 FT_DISCOVERY_ITERS=3 FT_CUPTI_CONFIRM=first-pass shim "$MODEL" "${ARGS[@]}" --bypass-from 0 \
    >"$WORK/out" 2>"$WORK/err" || fail "first-pass with bypassing launches failed"
[ "$(cat "$WORK/out")" = "$want" ] || fail "first-pass bypass: output changed"
expect_grep "CUPTI: [1-9][0-9]* driver call\(s\) of the first pass bypassed the wrappers \(first: cuLaunchKernel: _Z9model_mixPjPKji\); it stays attached" \
    "$WORK/err" "first-pass: stays attached"
expect_no_grep "detached until profiling" "$WORK/err" "first-pass: not detached"
pass "FT_CUPTI_CONFIRM=first-pass: a bypass in the first pass keeps CUPTI attached"
