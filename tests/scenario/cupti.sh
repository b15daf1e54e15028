# The CUPTI observer: it confirms every driver launch went through the wrappers, says
# once when another subscriber holds CUPTI and carries on, and FT_CUPTI=on makes that
# an error; the application's results never change.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 4 --dim 256 --iters 4 --quiet)
want=$(sim "$MODEL" "${ARGS[@]}")

FT_ENABLED=1 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" || fail "model under shim failed"
[ "$(cat "$WORK/out")" = "$want" ] || fail "output changed"
expect_grep "CUPTI saw [1-9][0-9]* launches.*all went through FlexTensor's wrappers" "$WORK/err" "observer summary"
pass "CUPTI confirms every launch went through the wrappers"

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
