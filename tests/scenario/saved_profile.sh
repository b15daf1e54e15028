# Saved profiles (FT_PROFILE_DIR): the second start of the same model takes the first
# start's profile and streams from its first pass, without discovery or profiling, with
# the same plan and the same output; another model (other weights, other shapes) in the
# same folder is refused with the difference named, and discovered; FT_PROFILE_READ_ONLY
# writes nothing; FT_SKIP_DISCOVERY without a profile stands down and says why; a
# corrupt or truncated profile is refused in one line; two writers leave one valid file.
. "$(dirname "$0")/lib.sh"
L=(--layers 4 --dim 512 --iters 10 --quiet)
DIR=$WORK/profiles
mkdir -p "$DIR"
FILE=$DIR/model-sim.ftprofile
COMMON=(FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB FT_PROFILE_DIR="$DIR")
plan_json() { "$BUILD/bin/ft-trace" --json "$1" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin).get('plan'), sort_keys=True))"; }
discovered() { grep -Eq 'discovery: 2 iteration\(s\) of 12 launches' "$1" && grep -q 'profiling: done' "$1"; }

compare_run first -- "${COMMON[@]}" FT_TRACE_FILE="$WORK/first.bin"
expect_grep "profile saved to $FILE \(4 units\)" "$WORK/first.err" "first start saves"
discovered "$WORK/first.err" || fail "first start: no discovery and profiling"
"$BUILD/bin/ft-trace" --profile "$FILE" >"$WORK/summary" || fail "ft-trace --profile refused the profile"
expect_grep 'unit\.3 +1052672 +3 +9-11 ' "$WORK/summary" "ft-trace --profile lists the units"
pass "first start: discovered, profiled, profile saved and readable by ft-trace --profile"

compare_run second -- "${COMMON[@]}" FT_TRACE_FILE="$WORK/second.bin"
expect_grep "saved profile $FILE matched .*12 weights' sizes and contents.*discovery and profiling skipped, 4 units; checked in [0-9.]+ ms" \
    "$WORK/second.err" "second start matches"
expect_no_grep 'discovery: [0-9]+ iteration\(s\) of|profiling:|copy bandwidth' "$WORK/second.err" "second start"
[ "$(plan_json "$WORK/first.bin")" = "$(plan_json "$WORK/second.bin")" ] || fail "the second start's plan differs"
# Streaming from the first pass: each of the 10 passes loads the 4 units (the first start
# streamed only in the passes left after discovery and profiling); the run's last
# load, a move of the prefetching thread that no later call ended, may go uncounted
# (the program's last copy out does not wait for it).
expect_grep 'residency: (39|40) load\(s\)' "$WORK/second.err" "second start streams every pass"
pass "second start: profile matched, no discovery or profiling, the same plan, the same output, every pass streamed"

# FT_PROFILE_READ_ONLY with another model: refused, discovered, the folder unchanged.
before=$(ls -l --time-style=full-iso "$DIR"; sha256sum "$FILE")
compare_run seed --seed 7 -- "${COMMON[@]}" FT_PROFILE_READ_ONLY=1
expect_grep "warning: saved profile $FILE ignored: the content of allocation 1 \(a weight of unit\.0, 1048576 bytes\) differs" \
    "$WORK/seed.err" "other weights named"
discovered "$WORK/seed.err" || fail "other weights: discovery did not run"
[ "$before" = "$(ls -l --time-style=full-iso "$DIR"; sha256sum "$FILE")" ] || fail "FT_PROFILE_READ_ONLY changed the folder"
pass "other weights (--seed 7): refused with the allocation named, discovered; FT_PROFILE_READ_ONLY left the folder unchanged"

compare_run shapes --dim 256 -- "${COMMON[@]}" FT_PROFILE_READ_ONLY=1
expect_grep "warning: saved profile $FILE ignored: allocation 1 is 262144 bytes, the profile's \(a weight of unit\.0\) 1048576" \
    "$WORK/shapes.err" "other shapes named"
grep -Eq 'discovery: 2 iteration\(s\)' "$WORK/shapes.err" || fail "other shapes: discovery did not run"
pass "other shapes (--dim 256): refused with the allocation and sizes named, discovered"

# FT_SKIP_DISCOVERY: with the matching profile it streams; without one it stands down.
compare_run skip -- "${COMMON[@]}" FT_SKIP_DISCOVERY=1
expect_grep "matched" "$WORK/skip.err" "FT_SKIP_DISCOVERY with the profile"
mkdir "$WORK/empty"
compare_run skipnone -- FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB FT_PROFILE_DIR="$WORK/empty" FT_SKIP_DISCOVERY=1
expect_grep "error: FT_SKIP_DISCOVERY needs a matching saved profile in FT_PROFILE_DIR=$WORK/empty, and $WORK/empty/model-sim.ftprofile: there is no such file" \
    "$WORK/skipnone.err" "FT_SKIP_DISCOVERY without a profile"
expect_grep 'verdict: .*FlexTensor stood down|verdict: not offloaded.*stood down|stands down' "$WORK/skipnone.err" "stood down"
expect_no_grep 'discovery: [0-9]+ iteration\(s\) of' "$WORK/skipnone.err" "FT_SKIP_DISCOVERY without a profile"
[ -z "$(ls "$WORK/empty")" ] || fail "FT_SKIP_DISCOVERY without a profile wrote one"
pass "FT_SKIP_DISCOVERY: streams with the profile; without one, an error naming the folder and the reason, stood down"

# Corrupt and truncated profiles: one line each, discovery as usual, never a crash.
cp "$FILE" "$WORK/good"
for how in truncate flip; do
    cp "$WORK/good" "$FILE"
    if [ $how = truncate ]; then truncate -s 600 "$FILE"; else printf '\x5a' | dd of="$FILE" bs=1 seek=300 conv=notrunc status=none; fi
    compare_run "$how" -- "${COMMON[@]}" FT_PROFILE_READ_ONLY=1
    [ "$(grep -c "saved profile $FILE ignored" "$WORK/$how.err")" = 1 ] || fail "$how: not one line"
    expect_grep "saved profile $FILE ignored: (truncated|corrupt)" "$WORK/$how.err" "$how"
    discovered "$WORK/$how.err" || fail "$how: discovery did not run"
done
pass "truncated and corrupt profiles: refused in one line, discovery as usual"

# Two writers at once: one valid file, no temporary left behind.
rm -f "$DIR"/*
for i in 1 2; do
    env FT_ENABLED=1 "${COMMON[@]}" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" "$MODEL" "${L[@]}" \
        >/dev/null 2>"$WORK/w$i.err" &
done
wait
[ "$(ls "$DIR")" = model-sim.ftprofile ] || fail "two writers left: $(ls "$DIR")"
"$BUILD/bin/ft-trace" --profile "$FILE" >/dev/null || fail "two writers: the profile does not read back"
pass "two writers at once: one valid profile, no temporary file left"

# Under FT_SPILL (the default), a model twice the budget: the second start places the
# weights its saved plan streams in host memory as they are allocated, and the copies
# that load them land there; loading moves nothing in and out (the first start moved
# each weight past the budget in and out as the next was copied), the same output.
rm -f "$DIR"/*
L=(--layers 8 --dim 512 --iters 10 --quiet)
SPILLED=(FT_SPILL=1 FT_GPU_MEM_LIMIT=5MiB FT_PROFILE_DIR="$DIR")
compare_run spill1 -- "${SPILLED[@]}"
compare_run spill2 -- "${SPILLED[@]}"
expect_grep "saved profile $FILE matched" "$WORK/spill2.err" "under FT_SPILL, the second start matches"
expect_grep 'FT_SPILL: 8 allocation\(s\) started in host memory because the saved profile.s plan streams them' \
    "$WORK/spill2.err" "placed by the saved plan"
expect_grep 'FT_SPILL: before the plan, 8 copy\(ies\) from host memory \(8\.0 MiB\) into allocations in host memory served there' \
    "$WORK/spill2.err" "copies served in host memory"
moved() { sed -n 's/.*FT_SPILL: before the plan, \([0-9]*\) allocation(s) moved in and \([0-9]*\) out.*/\1 \2/p' "$1"; }
read -r in1 out1 <<<"$(moved "$WORK/spill1.err")"
read -r in2 out2 <<<"$(moved "$WORK/spill2.err")"
[ "${in1:-0}" -ge 8 ] || fail "first start under FT_SPILL: expected moves, got '${in1:-none}'"
[ "${in2:-0}" -le 1 ] && [ "${out2:-0}" -eq 0 ] || fail "second start under FT_SPILL moved ${in2:-0} in and ${out2:-0} out"
pass "under FT_SPILL, the second start places the streamed weights in host memory and loads them there: ${in1}/${out1} moves, then ${in2:-0}/${out2:-0}, the same output"
# Their host stores are made ahead by threads, from the program's first allocation on
# (how many are ready when the program asks depends on the threads' pace): each one
# made is taken by an allocation or freed when the profile is decided.
ahead() {
    sed -n 's/.*saved profile: \([0-9]*\) host store(s), \([0-9.]*\) MiB, made ahead.*; \([0-9]*\) (\([0-9.]*\) MiB) taken as .*; \([0-9.]*\) MiB unused and freed (\(.*\))$/\1 \2 \3 \4 \5 \6/p' "$1"
}
check_ahead() { # file, the reason expected
    local n mib taken tmib left why
    read -r n mib taken tmib left why <<<"$(ahead "$1")"
    [ -n "$n" ] || fail "$1: no line on host stores made ahead"
    [ "$why" = "$2" ] || fail "$1: host stores made ahead ended with '$why', expected '$2'"
    [ "$taken" -le 8 ] && [ "$taken" -le "$n" ] || fail "$1: $taken of $n host stores made ahead taken by 8 allocations"
    awk -v a="$mib" -v b="$tmib" -v c="$left" 'BEGIN { exit !(a == b + c) }' ||
        fail "$1: $mib MiB made ahead, $tmib taken and $left freed"
    echo "$taken of $n"
}
got=$(check_ahead "$WORK/spill2.err" "the profile matched: every weight is allocated")
pass "the second start's host stores made ahead ($got taken), every one taken or freed"
# Other weights of the same shapes: placed by the saved plan all the same (the sizes
# match), then refused at the first pass; discovery runs on, the weights in host memory
# are faulted in as usual, the same output.
compare_run spillseed --seed 7 -- "${SPILLED[@]}" FT_PROFILE_READ_ONLY=1
expect_grep "saved profile $FILE ignored: the content of allocation" "$WORK/spillseed.err" "other weights under FT_SPILL"
expect_grep 'started in host memory because the saved profile.s plan streams them' "$WORK/spillseed.err" "placed before the refusal"
got=$(check_ahead "$WORK/spillseed.err" "the profile was ignored")
# 16 MiB weights: the copies that load them into host memory are cut among threads.
mkdir -p "$WORK/big"
L=(--layers 6 --dim 2048 --iters 6 --quiet)
BIG=(FT_SPILL=1 FT_GPU_MEM_LIMIT=48MiB FT_PROFILE_DIR="$WORK/big")
compare_run big1 -- "${BIG[@]}"
compare_run big2 -- "${BIG[@]}"
expect_grep 'FT_SPILL: before the plan, 6 copy\(ies\) from host memory \(96\.0 MiB\) into allocations in host memory served there' \
    "$WORK/big2.err" "16 MiB weights loaded in host memory"
got=$(check_ahead "$WORK/big2.err" "the profile matched: every weight is allocated")
compare_run big3 -- "${BIG[@]}" FT_PINNED_MEMORY_MODE=alloc
got3=$(check_ahead "$WORK/big3.err" "the profile matched: every weight is allocated")
pass "16 MiB weights: loaded into host stores made ahead ($got taken; $got3 with FT_PINNED_MEMORY_MODE=alloc) by copies cut among threads, the same output"
L=(--layers 8 --dim 512 --iters 10 --quiet)
pass "under FT_SPILL, other weights placed by a saved plan that is then refused: discovered, the same output"
# One allocation holding every weight, served in pieces: the second start streams from
# the profile. A saved profile keeps no pointers, so a pointer into a piece where two
# layers meet also loads the piece after it (before, the second start's kernels read
# the next layer's pieces unmapped: an illegal address).
PIECES=(FT_GPU_MEM_LIMIT=64MiB FT_PROFILE_DIR="$WORK/pieces")
mkdir -p "$WORK/pieces"
P=(--layers 8 --dim 2048 --segments 136)
compare_run pieces1 "${P[@]}" -- "${PIECES[@]}"
expect_grep 'profile saved to .*model-sim.ftprofile \(8 units\)' "$WORK/pieces1.err" "pieces: first start saves"
compare_run pieces2 "${P[@]}" -- "${PIECES[@]}"
expect_grep 'saved profile .* matched .*discovery and profiling skipped, 8 units' "$WORK/pieces2.err" "pieces: second start matches"
expect_grep 'verdict: offloaded: 8 of 8 units stream' "$WORK/pieces2.err" "pieces: second start streams"
pass "one allocation served in pieces: the second start takes the profile and streams 8 of 8 units, the same output"
