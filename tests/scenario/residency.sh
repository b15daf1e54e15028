# The residency engine, first version (demand fetch): streamed units live in pinned
# host memory and are loaded at their first use, at most `slots` at once; results are
# those of a run without the shim, also with writes into an offloaded weight, several
# threads, and streams that take real time (FTSIM_TIME_SCALE).
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 6 --dim 512 --iters 12 --quiet)

run_pair() { # NAME EXTRA...
    local name=$1
    shift
    sim "$MODEL" "${ARGS[@]}" "$@" >"$WORK/$name.plain" || fail "$name: model without shim failed"
    FTSIM_TIME_SCALE=0.01 FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
        shim "$MODEL" "${ARGS[@]}" "$@" >"$WORK/$name.shim" 2>"$WORK/$name.err" \
        || { sed 's/^/    | /' "$WORK/$name.err" >&2; fail "$name: model under the engine failed"; }
    cmp -s "$WORK/$name.plain" "$WORK/$name.shim" || fail "$name: output differs under the engine"
    expect_grep 'residency: 6 unit\(s\), 6\.0 MiB, moved to pinned host memory' "$WORK/$name.err" "$name: eviction"
    expect_grep 'residency: [1-9][0-9]* load\(s\) on demand .* at most 4\.0 MiB of streamed units held at once' \
        "$WORK/$name.err" "$name: loads within the slots"
}

run_pair plain
pass "6 of 6 units offloaded under a 5 MiB budget (2 slots): same output; at most 2 units held"
run_pair poke --poke 9
pass "a write into an offloaded weight is kept (written back before its memory goes)"
run_pair threads --threads 3
pass "3 threads on 3 streams: same output"
