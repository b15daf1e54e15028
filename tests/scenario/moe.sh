# Mixture of experts (model.c --moe E,K): every layer has E experts and each forward
# routes to K of them, chosen per forward by a seeded router and launched in the
# experts' order, as transformers' loop over the experts that got tokens. On the H200
# a Mixtral-style model under `ft-run --gpu-mem` found no weights (issue #9, item 4);
# here too, discovery finds no repeated pass while the routing changes, so these cases
# check what must hold already: same output as without the shim, no crash, a verdict;
# and with K = E (every expert every forward) the experts stream like any weight.
. "$(dirname "$0")/lib.sh"
L=(--layers 8 --dim 512 --quiet)

# Every expert every forward: 8 units of 5 MiB (the layer's weight and its 4 experts),
# 22 MiB of budget: the plan streams them.
compare_run dense --iters 12 --moe 4,4 -- FT_GPU_MEM_LIMIT=22MiB
expect_grep 'verdict: offloaded: [0-9]+ of 8 units stream' "$WORK/dense.err" "every expert routed"
pass "MoE with every expert routed each forward: experts found as weights and streamed, same output"

# 2 of 8 experts a forward, 72 MiB of weights under 24 MiB (1/3): FT_SPILL on (the
# default) and off, one thread and two, and with discovery bounded so that it stands
# down in the run.
compare_run moe --iters 20 --moe 8,2 -- FT_GPU_MEM_LIMIT=24MiB FT_SPILL=1
compare_run moe-nospill --iters 20 --moe 8,2 -- FT_GPU_MEM_LIMIT=24MiB FT_SPILL=0
compare_run moe-threads --iters 20 --moe 8,2 --threads 2 -- FT_GPU_MEM_LIMIT=24MiB FT_SPILL=1
compare_run moe-bound --iters 20 --moe 8,2 -- FT_GPU_MEM_LIMIT=24MiB FT_SPILL=1 FT_OBSERVE_MAX_LAUNCHES=400
expect_grep 'verdict: stood down: discovery did not find the program.s passes in 400 launches' "$WORK/moe-bound.err" "bounded"
pass "MoE with 2 of 8 experts routed a forward at 1/3 of the weights: same output, no crash (FT_SPILL on and off, two threads, bounded discovery)"
