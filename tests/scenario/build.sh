# The build's own machinery, on fakes: tests/run.sh (make check's runner) and
# tools/setup-deps.sh (make's set-up).
. "$(dirname "$0")/lib.sh"

# --- tests/run.sh: every step runs; the failures are named at the end --------------
F=$WORK/fake-build
mkdir -p "$F/tests" "$WORK/scen"
printf '#!/bin/sh\necho unit ran >>"%s"\nexit 1\n' "$WORK/ran" >"$F/tests/check_unit"
printf '#!/bin/sh\necho "sim ran with $LD_LIBRARY_PATH" >>"%s"\n' "$WORK/ran" >"$F/tests/check_sim"
chmod +x "$F/tests/check_unit" "$F/tests/check_sim"
for s in a b c; do printf 'echo "%s ran with BUILD=$BUILD" >>"%s"\n' $s "$WORK/ran" >"$WORK/scen/$s.sh"; done
echo 'exit 3' >>"$WORK/scen/a.sh"
echo 'exit 1' >>"$WORK/scen/c.sh"
set +e
BUILD=$F bash tests/run.sh "$WORK/scen/a.sh" "$WORK/scen/b.sh" "$WORK/scen/c.sh" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "run.sh with failures: exit $rc, want 1"
printf '%s\n' "unit ran" "sim ran with $F/sim" "a ran with BUILD=$F" "b ran with BUILD=$F" "c ran with BUILD=$F" >"$WORK/want"
cmp -s "$WORK/want" "$WORK/ran" || { diff "$WORK/want" "$WORK/ran" >&2; fail "run.sh did not run every step, in order"; }
printf '%s\n' "== unit suites" "== simulator suites" "== scenario $WORK/scen/a.sh" "== scenario $WORK/scen/b.sh" \
    "== scenario $WORK/scen/c.sh" >"$WORK/want"
cmp -s "$WORK/want" "$WORK/out" || { diff "$WORK/want" "$WORK/out" >&2; fail "run.sh headings"; }
printf '%s\n' "make check: 3 of 5 failed:" "  unit suites" "  scenario $WORK/scen/a.sh" "  scenario $WORK/scen/c.sh" >"$WORK/want"
cmp -s "$WORK/want" "$WORK/err" || { diff "$WORK/want" "$WORK/err" >&2; fail "run.sh summary"; }
pass "run.sh runs every step after failures, names the 3 failed of 5, exits 1"
: >"$WORK/ran"
printf '#!/bin/sh\nexit 0\n' >"$F/tests/check_unit"
sed -i '$d' "$WORK/scen/a.sh" "$WORK/scen/c.sh"
BUILD=$F bash tests/run.sh "$WORK/scen/a.sh" "$WORK/scen/c.sh" >"$WORK/out" 2>"$WORK/err" || fail "run.sh, all passing: exit $?"
[ "$(tail -n 1 "$WORK/out")" = "make check: all passed (4)" ] && [ ! -s "$WORK/err" ] || fail "run.sh, all passing: $(tail -n 1 "$WORK/out")"
pass "run.sh, all passing: exit 0, 'all passed'"
