# ft-trace on truncated, corrupted and foreign files: a one-line reason, exit 1, never
# a crash or a partial report.
. "$(dirname "$0")/lib.sh"
FT_ENABLED=1 FT_LOG_LEVEL=error FT_TRACE_FILE="$WORK/t.bin" shim "$MODEL" --layers 1 --dim 16 --iters 1 >/dev/null \
    || fail "model run failed"
size=$(stat -c %s "$WORK/t.bin")

check_bad() { # FILE PATTERN WHAT
    set +e
    "$BUILD/bin/ft-trace" "$1" >"$WORK/o" 2>"$WORK/e"
    local rc=$?
    set -e
    [ $rc -eq 1 ] || fail "$3: exit $rc, want 1"
    [ ! -s "$WORK/o" ] || fail "$3: printed a partial report"
    expect_grep "$2" "$WORK/e" "$3"
}
for cut in 0 7 16 20 $((size / 2)) $((size - 1)); do
    head -c $cut "$WORK/t.bin" >"$WORK/cut.bin"
    check_bad "$WORK/cut.bin" 'truncated|shorter than|not a FlexTensor' "truncated at $cut"
done
pass "truncated at 0, 7, 16, 20, half and one byte short"
cp "$WORK/t.bin" "$WORK/flip.bin"
printf '\xff' | dd of="$WORK/flip.bin" bs=1 seek=$((size / 2)) conv=notrunc status=none
check_bad "$WORK/flip.bin" 'corrupt|truncated' "one byte flipped"
pass "a flipped byte is detected"
echo "hello" >"$WORK/text.bin"
check_bad "$WORK/text.bin" 'not a FlexTensor trace' "foreign file"
check_bad "$WORK/none.bin" 'No such file' "missing file"
pass "foreign and missing files"
