# Randomised residency scenarios: layer counts and sizes, budgets (from below the
# smallest plan to above the model; a case under the smallest plan runs again above it), threads on their own streams, pointer arrays,
# stale addresses in argument padding (also first seen after discovery), a weight every
# layer reads, passes of two lengths, activations that move after discovery, launches
# reading two layers' weights after discovery, activations that alternate from one
# forward to the next, passes that lose their last layer, reads
# and writes of an offloaded weight, a layer freed mid-run, a library's workspace from
# the driver, address space reserved in large, small or per-allocation pieces
# (FT_VMM_RESERVE), both pinning modes, stale words into a weight, activation kernels
# with a twin chosen from a forward on, the last forward captured into a CUDA graph and
# replayed (cut into segments), or built node by node, its executable graph updated at
# times (from a second capture, or node by node), or from the
# second forward on only replays (found from them), with eager forwards between the
# replays or a word pointing into layer 1 in the graph only; kernels alternating
# between layers (a pass that repeats every two); weights and activations in memory
# the program maps itself, served (a mapping a tensor, or XLA's pool); weights made by
# a kernel or copied in after other kernels, a compiler's timing or a framework's
# warm-up before the loop. Every
# case must print what a run without the shim prints. The cases come from a fixed
# seed (FT_TEST_SEED overrides it, FT_TEST_CASES the count); a failure names the seed
# and the case's command.
. "$(dirname "$0")/lib.sh"
SEED=${FT_TEST_SEED:-20261129}
CASES=${FT_TEST_CASES:-10}
RANDOM=$SEED
offloaded=0 refused=0 resident=0 cut=0 one=0
for ((i = 0; i < CASES; i++)); do
    layers=$((3 + RANDOM % 8))
    dim=$((512 + 256 * (RANDOM % 3)))
    layer_bytes=$((dim * dim * 4 + 2 * dim * 4))
    total=$((layers * layer_bytes))
    # A slot holds a layer's weight mapped at the 2 MiB granularity; the budget goes
    # from 1.5 slots (below the smallest two-slot plan: one slot, or none) to a little
    # over the model.
    slot=$(((dim * dim * 4 + 2097151) / 2097152 * 2097152))
    lo=$((slot * 3 / 2)) hi=$((total + layer_bytes))
    budget=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
    threads=$((1 + RANDOM % 3))
    extra=()
    ((RANDOM % 3 == 0)) && extra+=(--ptr-arrays)
    ((RANDOM % 6 == 0)) && extra+=(--ptr-arrays --big-tables) # tables of 1 MiB and more: spillable
    ((RANDOM % 3 == 0)) && extra+=(--stale)
    ((RANDOM % 4 == 0)) && extra+=(--shared)
    iters=$((12 + RANDOM % 5))
    ((RANDOM % 3 == 0)) && extra+=(--vary $((7 + RANDOM % 3)))
    ((RANDOM % 4 == 0)) && extra+=(--peek $((9 + RANDOM % (iters - 9))))
    ((RANDOM % 3 == 0)) && extra+=(--poke $((9 + RANDOM % (iters - 9))))
    ((threads == 1 && RANDOM % 3 == 0)) && extra+=(--drop $((9 + RANDOM % (iters - 9))))
    ((RANDOM % 4 == 0)) && extra+=(--swap-acts $((3 + RANDOM % 6)))
    ((RANDOM % 4 == 0)) && extra+=(--stale-from $((3 + RANDOM % 6)))
    ((RANDOM % 5 == 0)) && extra+=(--stale-new $((3 + RANDOM % 8)))
    ((RANDOM % 5 == 0)) && extra+=(--segments $((2 + RANDOM % 3)))
    ((RANDOM % 5 == 0)) && extra+=(--far-new $((3 + RANDOM % 8)))
    ((RANDOM % 5 == 0)) && extra+=(--cross-from $((9 + RANDOM % (iters - 9))))
    ((RANDOM % 6 == 0)) && extra+=(--skip-last-from $((5 + RANDOM % 4)))
    ((RANDOM % 5 == 0)) && extra+=(--big-last $((2 + RANDOM % 3))) # a head larger than a layer
    ((threads > 1 && RANDOM % 4 == 0)) && extra+=(--race-alloc $((1 + RANDOM % 3)))
    ((RANDOM % 5 == 0)) && extra+=(--drv-workspace $((1 + RANDOM % 4))) # cuBLAS's workspace, by cuMemAlloc
    # address space reserved at a time: the default, a few regions' worth (many
    # reservations, ranges reused from the free list), or one per allocation
    reserves=(16GiB 8MiB 0)
    reserve=${reserves[RANDOM % 3]}
    modes=(alloc host_register)
    mode=${modes[RANDOM % 2]}
    spill=$((RANDOM % 2)) # the default (1) holds the budget from the first allocation
    ((RANDOM % 5 == 0)) && extra+=(--alternate-acts) # a pass found two forwards long, folded
    ((RANDOM % 5 == 0)) && extra+=(--alt-odd) # kernels alternating between layers: a period of two
    ((RANDOM % 3 == 0)) && extra+=(--stale-off $((RANDOM % 3072))) # --stale-new's word that far in
    # a kernel chosen by shape from forward K on (passes leave the record and come back)
    ((threads == 1 && RANDOM % 5 == 0)) && extra+=(--act-kernels $((2 + RANDOM % 6)) --act-twin $((3 + RANDOM % 8)))
    # the last forward captured into a CUDA graph and replayed (cut into segments when
    # it reads more streamed units than the slots hold), updated from a second capture
    # at times; not with the options that allocate inside a forward, nor threads
    if ((threads == 1 && RANDOM % 3 == 0)) && [[ " ${extra[*]} " != *" --swap-acts "* &&
        " ${extra[*]} " != *" --alternate-acts "* && " ${extra[*]} " != *" --drop "* &&
        " ${extra[*]} " != *" --drv-workspace "* ]]; then
        # or, a third of the time, a program of replays from its second forward on
        # (discovery and profiling from the replays, as torch.compile's reduce-overhead)
        if ((RANDOM % 3 == 0)); then iters=$((1 + RANDOM % 2)); replays=10; else replays=2; fi
        # half the time built node by node, as XLA builds its command buffers, and
        # changed node by node after its first replay (its input moved)
        if ((RANDOM % 2 == 0 && layers >= 3)) && [[ " ${extra[*]} " != *" --cross-from "* && " ${extra[*]} " != *" --moe "* ]]; then
            extra+=(--graph-nodes $replays)
            ((RANDOM % 2 == 0)) && extra+=(--graph-nodes-update)
        else
            extra+=(--graph $replays)
            ((RANDOM % 2 == 0)) && extra+=(--graph-update)
            ((RANDOM % 3 == 0)) && extra+=(--stale-graph) # a word that points into layer 1 in the graph only
            ((RANDOM % 3 == 0)) && extra+=(--graph-eager) # an eager forward after each replay
        fi
    fi
    # weights and activations in memory the program maps itself, served
    # (FT_PROGRAM_MAPPINGS=serve): a mapping a tensor, or chunks of a pool end to end
    # with tensors packed at 256 bytes across them (XLA's)
    # with tensors packed at 256 bytes across them (XLA's); a large pool's room goes to
    # host memory at the switch, and forwards may carve fresh buffers into it later
    if ((RANDOM % 4 == 0)); then
        if ((RANDOM % 2 == 0)); then
            extra+=(--own-vmm)
        else
            pool=$((2 + 2 * (RANDOM % 8)))
            ((RANDOM % 3 == 0)) && pool=$((64 + 64 * (RANDOM % 3)))
            extra+=(--own-vmm-pool $pool)
            # (a forward captured into a graph allocates nothing)
            [[ " ${extra[*]} " != *" --graph"* ]] && ((RANDOM % 2 == 0)) && extra+=(--pool-late $((RANDOM % iters)))
        fi
    fi
    # how the weights came to be, or what ran before the loop: written by a kernel after
    # the first launch (torch.device("cuda")), copied in after unrelated kernels,
    # a compiler timing kernels (one, two in turn, or two on its own buffers), a
    # framework's warm-up before the weights exist
    case $((RANDOM % 8)) in
    0) extra+=(--init-kernel) ;;
    1) extra+=(--load-after-launch) ;;
    2) extra+=(--autotune "$((50 + RANDOM % 250)),$((1 + RANDOM % 3))") ;;
    3) extra+=(--prologue) ;;
    esac
    args=(--layers "$layers" --dim "$dim" --iters "$iters" --threads "$threads" --quiet "${extra[@]}")
    sim "$MODEL" "${args[@]}" >"$WORK/plain" || fail "seed $SEED case $i: model ${args[*]}: run without the shim failed"
    # Under the smallest budget that works, the case runs once more at a budget drawn
    # from there up by the weights two slots do not hold (the non-weight memory, the
    # activations in whole granules, is most of a model this small), so that most
    # cases stream.
    for try in 1 2; do
        what="seed $SEED case $i: FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget FT_PINNED_MEMORY_MODE=$mode FT_VMM_RESERVE=$reserve FT_PROGRAM_MAPPINGS=serve model ${args[*]}"
        FTSIM_TIME_SCALE=0.002 FT_SPILL=$spill FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=$budget \
            FT_PINNED_MEMORY_MODE=$mode FT_VMM_RESERVE=$reserve FT_PROGRAM_MAPPINGS=serve shim "$MODEL" "${args[@]}" \
            >"$WORK/shim" 2>"$WORK/err" || { sed 's/^/    | /' "$WORK/err" >&2; fail "$what: failed under the shim"; }
        cmp -s "$WORK/plain" "$WORK/shim" \
            || { diff "$WORK/plain" "$WORK/shim" | sed 's/^/    | /' >&2; fail "$what: output differs"; }
        grep -q 'CUDA graphs: graph 0x[0-9a-f]* reads .* cut into' "$WORK/err" && cut=$((cut + 1))
        grep -q 'warning: plan: one slot' "$WORK/err" && one=$((one + 1))
        if grep -q 'residency: [0-9]* unit(s), .* moved to pinned host memory' "$WORK/err"; then
            offloaded=$((offloaded + 1))
            break
        fi
        least=$(sed -n 's/.*smallest budget that works is \([0-9]*\)\.\([0-9]\) MiB.*/\1\2/p' "$WORK/err" | head -1)
        if [ -z "$least" ]; then
            resident=$((resident + 1))
            break
        fi
        refused=$((refused + 1))
        least=$((least * 104858 + 1048576)) # tenths of a MiB, rounded up
        [ "$try" = 1 ] || break
        span=$((total - 2 * slot > 1048576 ? total - 2 * slot : 1048576))
        budget=$((least + (RANDOM * 32768 + RANDOM) % span))
    done
done
pass "$CASES random cases (seed $SEED): same output as without the shim; $offloaded runs offloaded ($one through one slot), $refused under the smallest budget (kept resident; each case run again above it), $resident fitting; $cut with a CUDA graph cut into segments"
