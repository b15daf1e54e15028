# ft-run and ft-trace on their own: --version prints the version the Makefile holds (its
# one source), --help the usage, and an unknown option is an error, never a file name.
. "$(dirname "$0")/lib.sh"
want=$(sed -n 's/^FT_VERSION *:= *//p' Makefile)
[ -n "$want" ] || fail "no FT_VERSION in the Makefile"
for tool in ft-run ft-trace; do
    "$BUILD/bin/$tool" --version >"$WORK/out" 2>"$WORK/err" || { rc=$?; cat "$WORK/err" >&2; fail "$tool --version: exit $rc"; }
    [ "$(cat "$WORK/out")" = "$tool $want" ] || fail "$tool --version printed '$(cat "$WORK/out")', want '$tool $want'"
    [ ! -s "$WORK/err" ] || { cat "$WORK/err" >&2; fail "$tool --version wrote to stderr"; }
    "$BUILD/bin/$tool" --help >"$WORK/out" 2>&1 || fail "$tool --help: exit $?"
    expect_grep "^usage: $tool" "$WORK/out" "$tool --help"
    expect_grep '--version' "$WORK/out" "$tool --help names --version"
    set +e
    "$BUILD/bin/$tool" --no-such-option >"$WORK/out" 2>"$WORK/err"
    rc=$?
    set -e
    [ $rc -eq 2 ] || fail "$tool --no-such-option: exit $rc, want 2"
    expect_grep 'usage:' "$WORK/err" "$tool --no-such-option"
done
pass "ft-run and ft-trace --version print $want (the Makefile's FT_VERSION); --help; an unknown option exits 2"
# After the program's name, --version is the program's.
ftrun "$BUILD/bin/ft-run" --disable -- sh -c 'echo "$@"' sh --version >"$WORK/out" 2>"$WORK/err" \
    || { cat "$WORK/err" >&2; fail "ft-run -- sh -c ... --version"; }
[ "$(cat "$WORK/out")" = "--version" ] || fail "ft-run -- PROGRAM --version: '$(cat "$WORK/out")'"
pass "ft-run -- PROGRAM --version passes --version to PROGRAM"
# ft-run puts the shim ahead of the user's preloads, but behind a sanitizer's runtime,
# which must come first (ASan refuses to start otherwise). The entries need not exist:
# ld.so only warns about those it cannot load (a sanitizer build's own runtime stands
# in for the first).
rt=${SAN_PRELOAD:-/opt/b/libasan.so.8}
LD_PRELOAD="/opt/a/libother.so $rt:/opt/c/libclang_rt.tsan-x86_64.so" \
    "$BUILD/bin/ft-run" --disable -- sh -c 'echo "$LD_PRELOAD"' >"$WORK/out" 2>"$WORK/err" \
    || { cat "$WORK/err" >&2; fail "ft-run with a user's LD_PRELOAD"; }
want="$rt:/opt/c/libclang_rt.tsan-x86_64.so:$BUILD/libflextensor.so:/opt/a/libother.so"
[ "$(cat "$WORK/out")" = "$want" ] || fail "ft-run's LD_PRELOAD: '$(cat "$WORK/out")', want '$want'"
pass "ft-run keeps a sanitizer's runtime first in LD_PRELOAD, then the shim, then the user's other preloads"
# "--" ends ft-trace's options: a file may begin with a dash.
set +e
"$BUILD/bin/ft-trace" -- -no-such-file >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "ft-trace -- -no-such-file: exit $rc, want 1"
expect_grep '^ft-trace: -no-such-file: No such file' "$WORK/err" "ft-trace -- FILE"
pass "ft-trace -- -FILE reads a file named -FILE"
# A flag given again and again keeps its last value (it once overran a fixed array).
args=()
for i in $(seq 1000); do args+=(--log-level debug); done
"$BUILD/bin/ft-run" "${args[@]}" --log-level error --print-config >"$WORK/out" 2>"$WORK/err" \
    || { rc=$?; cat "$WORK/err" >&2; fail "ft-run with --log-level 1001 times: exit $rc"; }
expect_grep '^FT_LOG_LEVEL +(= +)?error +\(ft-run --log-level\)' "$WORK/out" "the last --log-level wins"
pass "ft-run --log-level given 1001 times: the last one counts"
