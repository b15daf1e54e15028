# Decode steps with a KV cache (examples/model.c --grow-cache: transformers'
# DynamicCache under PyTorch's caching allocator). On the H200 a 28-layer Llama moved
# with .to("cuda") found no pass in 15 decode steps: the activations lie in a segment
# that exists before the first launch, at places that move every step as the cache
# grows, and so did the detector's keys. With default settings (FT_SPILL on and off)
# and a budget of a third of the weights: discovery ends within 5 forwards (the
# snapshot at the first launch and two host synchronisations tell the segment varies,
# two more forwards give the pass), the pass is one whole forward (72 launches, 12
# units of one 4 MiB matrix each; the segment with the layers' vectors, the inputs and
# the activations is no weight), the plan streams, and every forward's checksum is the
# run's without the shim. Before the detector left varying segments out of its keys,
# discovery had not ended after the 12 forwards.
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 12 --dim 1024 --iters 12 --grow-cache)
FORWARD=72 # launches: 12 layers of gemv, mix, cat, scale, cat, attend
sim "$MODEL" "${ARGS[@]}" >"$WORK/plain" || fail "model without shim failed"
[ "$(grep -c '^iteration [0-9]* checksum' "$WORK/plain")" = 12 ] || fail "the model printed no checksum per forward"

for spill in 1 0; do
    name=kv$spill
    FT_SPILL=$spill FT_ENABLED=1 FT_GPU_MEM_LIMIT=16MiB FT_TRACE_FILE="$WORK/$name.bin" \
        shim "$MODEL" "${ARGS[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "FT_SPILL=$spill: model under shim failed"
    cmp -s "$WORK/plain" "$WORK/$name.out" || fail "FT_SPILL=$spill: checksums differ from the run without the shim"
    line=$(grep -E '^flextensor: discovery: [0-9]+ iteration\(s\) of ' "$WORK/$name.err" || true)
    [ -n "$line" ] || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "FT_SPILL=$spill: discovery did not end in 12 forwards"; }
    [[ $line =~ ^flextensor:\ discovery:\ 1\ iteration\(s\)\ of\ $FORWARD\ launches,\ 12\ units,\ 48\.0\ MiB\ of\ weights,\ after\ ([0-9]+)\ launches$ ]] \
        || fail "FT_SPILL=$spill: not one forward of 12 units: $line"
    after=${BASH_REMATCH[1]}
    ((after <= 5 * FORWARD)) || fail "FT_SPILL=$spill: discovery ended after $after launches, past 5 forwards ($((5 * FORWARD)))"
    expect_grep '^flextensor: plan \(memory mode, knapsack\): 12 of 12 units streamed' "$WORK/$name.err" "FT_SPILL=$spill: plan"
    # The cache grows after the plan: its segments go past the budget, said in the verdict.
    expect_grep '^flextensor: verdict: offloaded: 12 of 12 units stream \(memory mode, budget 16\.0 MiB' \
        "$WORK/$name.err" "FT_SPILL=$spill: verdict"
    "$BUILD/bin/ft-trace" --json "$WORK/$name.bin" | python3 -c '
import json, sys
d = json.load(sys.stdin)
regs = {r["id"]: r for r in d["regions"]}
units = d["units"]
assert len(units) == 12, len(units)
for u in units:
    assert [regs[r]["size"] for r in u["regions"]] == [4 << 20], (u["name"], u["regions"])
weights = [r for r in d["regions"] if "weight" in r["flag_names"]]
assert sum(r["size"] for r in weights) == 48 << 20, weights' || fail "FT_SPILL=$spill: units are not the 12 layer matrices"
    pass "FT_SPILL=$spill: discovery ended after $after launches (a forward is $FORWARD), one forward of 12 units; plan streams; same checksums"
done
