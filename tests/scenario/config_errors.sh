# An invalid configuration with FT_ENABLED=1 stops the process before main (exit 2)
# with a message naming the variable; without FT_ENABLED it runs unchanged.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 1 --dim 16 --iters 1)

set +e
FT_ENABLED=1 FT_NUM_BLOCKS=abc shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "invalid FT_NUM_BLOCKS with FT_ENABLED=1: exit $rc, want 2"
[ ! -s "$WORK/out" ] || fail "the application ran despite the invalid configuration"
expect_grep 'FT_NUM_BLOCKS' "$WORK/err" "error names the variable"
expect_grep 'abc' "$WORK/err" "error names the value"
pass "invalid value + FT_ENABLED=1: exit 2 before main, message names FT_NUM_BLOCKS=abc"

set +e
FT_ENABLED=1 FT_CONFIG_FILE="$WORK/missing.ini" shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "missing config file: exit $rc, want 2"
expect_grep 'missing.ini' "$WORK/err" "error names the file"
pass "missing config file: exit 2, message names the file"

FT_NUM_BLOCKS=abc shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" \
    || fail "with FlexTensor off an invalid value must not stop the program"
expect_grep '^checksum' "$WORK/out" "program ran"
pass "invalid value, FlexTensor off: program runs"

FT_ENABLED=1 FT_DISCOVERY_ITER=2 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" \
    || fail "an unknown FT_ variable must only warn"
expect_grep 'FT_DISCOVERY_ITER\b.*FT_DISCOVERY_ITERS' "$WORK/err" "nearest-name warning"
pass "unknown FT_DISCOVERY_ITER: warning suggests FT_DISCOVERY_ITERS"

set +e
FT_ENABLED=1 "$BUILD/bin/ft-run" --sim --gpu-mem 12XB -- "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "ft-run --gpu-mem 12XB: exit $rc, want 2"
expect_grep 'GPU_MEM_LIMIT' "$WORK/err" "ft-run error names the option"
pass "ft-run rejects --gpu-mem 12XB before starting the program"

printf '[flextensor]\nnum_blocks = 6\n' >"$WORK/ft.ini"
FT_PROFILING_ITERS=7 "$BUILD/bin/ft-run" --config "$WORK/ft.ini" --gpu-mem 512MiB --print-config >"$WORK/cfg" 2>&1 \
    || fail "ft-run --print-config failed"
expect_grep 'FT_NUM_BLOCKS.*6.*ft.ini:2' "$WORK/cfg" "file source with line"
expect_grep 'FT_PROFILING_ITERS.*7.*env' "$WORK/cfg" "env source"
expect_grep 'FT_GPU_MEM_LIMIT.*ft-run --gpu-mem' "$WORK/cfg" "explicit source"
expect_grep 'FT_STRATEGY.*knapsack.*default' "$WORK/cfg" "default source"
pass "ft-run --print-config shows value and source of every option"

# Sizes: 8192 without a unit ran with an 8 KiB budget ("0.0 MiB"); now it stops the
# program, from ft-run's flag and from the environment, and names the likely fix.
set +e
"$BUILD/bin/ft-run" --sim --gpu-mem 8192 -- "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "ft-run --gpu-mem 8192: exit $rc, want 2"
[ ! -s "$WORK/out" ] || fail "ft-run --gpu-mem 8192: the program ran"
expect_grep 'ft-run --gpu-mem: FT_GPU_MEM_LIMIT=8192: .*did you mean 8192MiB\?' "$WORK/err" "ft-run --gpu-mem 8192"
for v in FT_GPU_MEM_LIMIT=8192 FT_GPU_MEM_LIMIT=0.0001k FT_VMM_RESERVE=18446744073709551615; do
    set +e
    env FT_ENABLED=1 "$v" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
    rc=$?
    set -e
    [ $rc -eq 2 ] || fail "$v: exit $rc, want 2"
    [ ! -s "$WORK/out" ] || fail "$v: the program ran"
    expect_grep "error: ${v%%=*}=" "$WORK/err" "$v: error names the variable"
done
expect_grep 'FT_VMM_RESERVE=18446744073709551615: out of range .*at most 1TiB' "$WORK/err" "FT_VMM_RESERVE bound"
pass "sizes: --gpu-mem 8192 and FT_GPU_MEM_LIMIT=8192 (did you mean 8192MiB?), 0.0001k, FT_VMM_RESERVE=2^64-1 stop before main"

# A NUL byte in the file cut the value short (1\0GiB: a 1-byte budget): the file is
# refused, naming the line.
printf '[flextensor]\ngpu_mem_limit = 1\0GiB\n' >"$WORK/nul.ini"
set +e
FT_CONFIG_FILE="$WORK/nul.ini" shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "NUL byte in the config file: exit $rc, want 2"
expect_grep "error: $WORK/nul.ini:2: NUL byte in the file" "$WORK/err" "NUL byte: file and line named"
pass "a NUL byte in the config file stops the program, naming nul.ini:2"

# FT_SKIP_DISCOVERY=1 switched the engine off silently; it needs a saved profile, so
# without FT_PROFILE_DIR it is a configuration error, handled as an invalid value is.
set +e
FT_ENABLED=1 FT_SKIP_DISCOVERY=1 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "FT_SKIP_DISCOVERY=1: exit $rc, want 2"
expect_grep 'error: FT_SKIP_DISCOVERY=true \(env\) needs a saved profile, and FT_PROFILE_DIR is not set' "$WORK/err" "FT_SKIP_DISCOVERY=1"
FT_SKIP_DISCOVERY=1 shim "$MODEL" "${ARGS[@]}" >"$WORK/out" 2>"$WORK/err" \
    || fail "FT_SKIP_DISCOVERY=1 with FlexTensor off must not stop the program"
pass "FT_SKIP_DISCOVERY=1: a configuration error naming FT_PROFILE_DIR (exit 2 when enabled, as an invalid value)"

# Every option is read now: setting the last ones that were not (FT_OFFLOAD_TIMING,
# FT_PROFILE_DIR) warns of nothing, and --print-config marks none as not implemented.
# (FT_PROFILE_DIR's behaviour is tests/scenario/saved_profile.sh's.)
FT_ENABLED=1 FT_OFFLOAD_TIMING=eager FT_PROFILE_DIR="$WORK/profiles" shim "$MODEL" "${ARGS[@]}" \
    >"$WORK/out" 2>"$WORK/err" || fail "FT_OFFLOAD_TIMING and FT_PROFILE_DIR set: the program must run"
expect_grep '^checksum' "$WORK/out" "FT_OFFLOAD_TIMING and FT_PROFILE_DIR set: program ran"
expect_no_grep 'not implemented' "$WORK/err" "no option warned of as not implemented"
"$BUILD/bin/ft-run" --print-config >"$WORK/cfg" 2>&1 || fail "ft-run --print-config failed"
expect_no_grep 'not implemented' "$WORK/cfg" "--print-config marks no option as not implemented"
pass "FT_OFFLOAD_TIMING, FT_PROFILE_DIR: read, no warning; --print-config marks no option as not implemented"
