# The example model under the shim gives the checksum it gives without it, with
# every launch path counted; FT_ENABLED=0 changes nothing at all.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 4 --dim 256 --iters 3)

sim "$MODEL" "${ARGS[@]}" >"$WORK/plain.out" 2>"$WORK/plain.err" || fail "model without shim failed"
expect_grep '^checksum [0-9a-f]{16}$' "$WORK/plain.out" "model without shim"
want=$(grep '^checksum' "$WORK/plain.out")

FT_ENABLED=1 FT_LOG_LEVEL=info FT_TRACE_FILE="$WORK/t.bin" shim "$MODEL" "${ARGS[@]}" \
    >"$WORK/on.out" 2>"$WORK/on.err" || fail "model under shim failed"
[ "$(grep '^checksum' "$WORK/on.out")" = "$want" ] || fail "checksum differs under the shim"
pass "same checksum under the shim ($want)"
# 4 layers x 3 iterations: one gemv per layer through __cudaLaunchKernel, one mix
# through cudaLaunchKernelExC; the weights are 3 buffers per layer + 2 activations.
expect_grep '__cudaLaunchKernel +12$' "$WORK/on.err" "launch count"
expect_grep 'cudaLaunchKernelExC +12$' "$WORK/on.err" "ExC launch count"
expect_grep 'cudaMalloc +14$' "$WORK/on.err" "allocation count"
pass "launches and allocations counted"
[ -s "$WORK/t.bin" ] || fail "no trace written"
"$BUILD/bin/ft-trace" "$WORK/t.bin" >"$WORK/trace.txt" || fail "ft-trace failed on a good trace"
expect_grep '__cudaLaunchKernel +12$' "$WORK/trace.txt" "trace call count"
expect_grep 'FT_ENABLED +(1|true) +\(env\)' "$WORK/trace.txt" "trace config"
"$BUILD/bin/ft-trace" --json "$WORK/t.bin" >"$WORK/trace.json" || fail "ft-trace --json failed"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(c["name"]=="__cudaLaunchKernel" and c["count"]==12 for c in d["calls"])' \
    "$WORK/trace.json" || fail "ft-trace --json is not the expected JSON"
pass "trace written and read back (text and JSON)"

FT_ENABLED=0 shim "$MODEL" "${ARGS[@]}" >"$WORK/off.out" 2>"$WORK/off.err" || fail "model with FT_ENABLED=0 failed"
cmp -s "$WORK/plain.out" "$WORK/off.out" || fail "FT_ENABLED=0 changed the output"
expect_no_grep 'flextensor' "$WORK/off.err" "FT_ENABLED=0 must be silent"
pass "FT_ENABLED=0: identical output, silent"

sim "$MODEL" --layers 4 --dim 256 --iters 2 --threads 4 >"$WORK/mt.out" || fail "multithreaded model failed"
FT_ENABLED=1 shim "$MODEL" --layers 4 --dim 256 --iters 2 --threads 4 >"$WORK/mt-on.out" 2>/dev/null \
    || fail "multithreaded model under the shim failed"
[ "$(grep '^checksum' "$WORK/mt.out")" = "$want" ] || fail "4 threads on 4 streams disagree with 1"
[ "$(grep '^checksum' "$WORK/mt-on.out")" = "$want" ] || fail "4 threads under the shim disagree"
pass "4 threads x 4 streams: same checksum with and without the shim"
